package health

// wedgeJudge is the wedge verdict and the evidence it weighs besides the
// attempts' own progress: the token counters of a silent worker's engine,
// read as often as scrapeEvery while it needs to be. A read that
// overlapped a stall of this replica (stalls) is no progress.
type wedgeJudge struct {
	cfg    Config
	stalls *stallLog
}

// verdict sets the wedge verdict of a worker silent for WedgeTimeout and
// gives up its attempts; it lifts the verdict once the worker has delivered
// something since, half-opening the circuit and asking for a recovery probe
// at once, whose answer closes it. A worker that refuses recovery probes is
// also let go when it has nothing in flight, as before there were probes.
// Caller holds mu.
func (wj *wedgeJudge) verdict(w *worker, now int64, stalled bool) change {
	since := w.wedgedAt.Load()
	switch {
	case since == notSet && stalled:
		w.attempts.each(func(a *Attempt) { a.closeStuck() })
		w.recovery.next.reset()
		return setVerdict(&w.wedgedAt, true, now) | w.tripByVerdict(now)
	case since == notSet:
		return 0
	case w.heardAt.Load() >= since:
		ch := setVerdict(&w.wedgedAt, false, now)
		w.recovery.next.reset()
		if w.degradedAt.Load() == notSet {
			ch |= circuitMoved(w.breaker.halfOpen(now))
		}
		return ch
	case w.recovery.refused && w.inflight.Load() == 0:
		return setVerdict(&w.wedgedAt, false, now)
	}
	return 0
}

// scrapeStarted notes that a read of w's engine started at start.
func (wj *wedgeJudge) scrapeStarted(w *worker, start int64) {
	w.mu.Lock()
	w.engine.last = start
	w.mu.Unlock()
}

// engineRead applies a read of w's engine that started at start and ended at
// now: ok says it was readable. It counts as progress only if it has the
// token counters and no stall of this replica overlapped it.
func (wj *wedgeJudge) engineRead(w *worker, start, now int64, r engineReading, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recordEngine(start, r, ok && r.hasTokens && !wj.stalls.touched(start, now), wj.scrapeEvery())
}

// needsScrape reports whether Tick should have w's engine read: some attempt
// on it has heard nothing for a third of WedgeTimeout, and the last scrape
// is at least scrapeEvery old; or, for the saturation signal, it has
// attempts in flight and the last scrape is EngineScrapeInterval old.
// Caller holds mu.
func (wj *wedgeJudge) needsScrape(w *worker, now, oldestSilence int64) bool {
	if w.scraping.Load() {
		return false
	}
	if every := wj.cfg.EngineScrapeInterval.Nanoseconds(); every > 0 && w.inflight.Load() > 0 &&
		(w.engine.last == 0 || now-w.engine.last >= every) {
		return true
	}
	if oldestSilence < wj.cfg.WedgeTimeout.Nanoseconds()/3 {
		return false
	}
	return w.engine.last == 0 || now-w.engine.last >= wj.scrapeEvery()
}

// scrapeEvery is how often a worker's engine is read while it needs to be:
// often enough that a working engine shows progress well within WedgeTimeout,
// never more often than Tick runs.
func (wj *wedgeJudge) scrapeEvery() int64 {
	return max(wj.cfg.WedgeTimeout.Nanoseconds()/6, wj.cfg.EvalInterval.Nanoseconds())
}
