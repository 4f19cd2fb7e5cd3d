package health

// tick evaluates, at now, everything that depends on time passing (see
// Monitor.Tick), and emits what changed.
func (j *judge) tick(now int64) {
	st := j.stalls.snapshot()
	list := j.workers.Load().list
	// Each worker's silence is read before sweep gives up its silent
	// attempts: the proxy ends those at once, and a worker left with
	// nothing in flight would no longer look silent to judge.
	silent := make([]int64, len(list))
	for i, w := range list {
		w.mu.Lock()
		silent[i] = w.silence(now, st)
		w.mu.Unlock()
		j.sweep(w, now, st)
	}
	rates := j.degrade.rates(list, now)
	live := j.remote.liveReplicas()
	for i, w := range list {
		w.mu.Lock()
		ch := j.evaluate(w, now, silent[i], rates[i], live)
		w.mu.Unlock()
		j.report(w, ch)
	}
}

// sweep walks w's attempts in flight: it takes their rate slices, closes the
// Stuck channel of those silent for WedgeTimeout (all of them if w is
// wedged), and notes whether w's engine should be read.
func (j *judge) sweep(w *worker, now int64, st stalls) {
	wedge := j.cfg.WedgeTimeout.Nanoseconds()
	w.mu.Lock()
	defer w.mu.Unlock()
	engine := w.engineAt.Load()
	wedged := w.wedgedAt.Load() != notSet
	var oldest int64
	w.attempts.each(func(a *Attempt) {
		j.degrade.slice(w, a, now)
		silent := st.silence(max(a.heardSince(), engine), now)
		oldest = max(oldest, silent)
		if wedged || silent >= wedge {
			a.closeStuck()
		}
	})
	w.wantScrape.Store(j.wedge.needsScrape(w, now, oldest))
}

// evaluate applies one evaluation to w, silent for that long (-1 when idle).
// Caller holds mu.
func (j *judge) evaluate(w *worker, now int64, silent int64, r rateJudgement, live int) change {
	wedge := j.cfg.WedgeTimeout.Nanoseconds()
	ch := j.wedge.verdict(w, now, silent >= wedge)
	ch |= j.degrade.verdict(w, now, r.slow)
	w.suspectWedged, w.suspectSlow = silent >= wedge/2, r.suspect
	ch |= w.refreshRemote(live)
	switch {
	case w.verdictHeld():
		ch |= w.tripByVerdict(now)
	case w.breaker.expire(now):
		ch |= changeCircuit
	}
	if stateOf(w.breaker.word()) == CircuitClosed {
		w.recovery.open = false
	}
	w.publishCircuit()
	w.wantGenerate.Store(w.needsRecovery(now))
	return ch
}

// silence is how long w, busy, has delivered nothing while this replica was
// running to see it, or -1 when w is idle. Caller holds mu.
func (w *worker) silence(now int64, st stalls) int64 {
	last := w.lastProgress.Load()
	if w.inflight.Load() <= 0 || last == notSet {
		return -1
	}
	return st.silence(last, now)
}
