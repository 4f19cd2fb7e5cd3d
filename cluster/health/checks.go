package health

import (
	"context"
	"sync"
	"time"
)

// maxConcurrentProbes bounds the probes in flight in one round, which bounds
// the sockets a round opens; a slow worker holds one slot and delays nobody
// else's verdict.
const maxConcurrentProbes = 256

// CheckNow runs one round of active checks: every watched worker whose previous
// probe has finished is probed, in parallel, and each result is applied as soon
// as it arrives, so a slow worker does not delay the others' verdicts. It
// returns when every probe of the round has finished (within Timeout), or early
// with ctx's error once ctx ends, after aborting the probes in flight; a probe
// cut short by ctx is not counted against its worker. It then delivers pending
// OnChange notifications. Checks never touch request accounting or load.
func (m *Monitor) CheckNow(ctx context.Context) error {
	slots := make(chan struct{}, maxConcurrentProbes)
	var wg sync.WaitGroup
	defer m.deliver()
	defer wg.Wait()
	round := m.isolation.round.Add(1)
	for _, w := range m.workers.Load().list {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !w.checking.CompareAndSwap(false, true) {
			<-slots
			continue
		}
		wg.Go(func() {
			defer func() { w.checking.Store(false); <-slots }()
			m.checkOne(ctx, w, round)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// contactBase is the first wait before probing again a worker that has never
// answered its health endpoint; the wait doubles up to Interval.
const contactBase = time.Second

// checkOne probes w once, in CheckNow's round (or, for a first contact,
// the latest round), and applies the answer. A failure that may be this
// replica's own doing (the probe overlapped a stall of this replica, or came
// while it heard no peer and no worker) is not counted.
func (m *Monitor) checkOne(ctx context.Context, w *worker, round uint64) {
	start := m.now()
	err := m.probe.probe(ctx, w.target)
	if ctx.Err() != nil {
		return
	}
	now := m.now()
	if err != nil && m.stallTouched(start, now) {
		return
	}
	if err != nil && m.probeIsolated(start, now, round) {
		m.noteCutOff()
		return
	}
	if err == nil {
		m.noteAnswer(now, round)
	}
	if err != nil {
		m.log.Debug("health probe failed", "worker", w.id, "url", w.url, "err", err)
	}
	w.mu.Lock()
	ch := w.recordProbe(err == nil, &m.cfg)
	if !w.everUp {
		w.contact.failed(now, contactBase.Nanoseconds(), m.cfg.Interval.Nanoseconds())
	}
	w.mu.Unlock()
	m.report(w, ch)
	m.probed.announce()
}

// Run checks every worker every Interval (the first round at once), probes new
// workers as soon as SetWorkers adds them, beats the heartbeat that notices
// stalls of this replica and calls Tick every EvalInterval, sends the engine
// scrapes and recovery probes that Tick asks for, and delivers OnChange
// notifications as changes happen, until ctx ends. It returns nil once all its
// goroutines have finished, or ErrAlreadyRunning if another Run is active. The
// cadence uses real timers; verdicts use the Monitor's Clock.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer m.running.Store(false)
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentProbes)
	wg.Go(func() { m.checkLoop(ctx) })
	wg.Go(func() { m.evalLoop(ctx, &wg, sem) })
	wg.Wait()
	return nil
}

func (m *Monitor) checkLoop(ctx context.Context) {
	ticker := time.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	for {
		_ = m.CheckNow(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-m.isolation.recheck:
		}
	}
}

// evalLoop owns the heartbeat. The tasks it launches are counted by wg, which
// Run waits for.
func (m *Monitor) evalLoop(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) {
	ticker := time.NewTicker(m.cfg.EvalInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			m.beat()
			m.checkContact()
			m.Tick()
		case <-m.wake:
			m.deliver()
		}
		m.launch(ctx, wg, sem)
	}
}
