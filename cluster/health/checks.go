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
			m.checkOne(ctx, w)
		})
	}
	wg.Wait()
	return ctx.Err()
}

func (m *Monitor) checkOne(ctx context.Context, w *worker) {
	err := m.probe.probe(ctx, w.target)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		m.log.Debug("health probe failed", "worker", w.id, "url", w.url, "err", err)
	}
	w.mu.Lock()
	ch := w.recordProbe(err == nil, &m.cfg)
	w.mu.Unlock()
	m.report(w, ch)
}

// Run checks every worker every Interval (the first round at once), calls Tick
// every EvalInterval, and delivers OnChange notifications as changes happen,
// until ctx ends. It returns nil once all its goroutines have finished, or
// ErrAlreadyRunning if another Run is active. The cadence uses real timers;
// verdicts use the Monitor's Clock.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer m.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { m.checkLoop(ctx) })
	wg.Go(func() { m.evalLoop(ctx) })
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
		}
	}
}

func (m *Monitor) evalLoop(ctx context.Context) {
	ticker := time.NewTicker(m.cfg.EvalInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			m.Tick()
		case <-m.wake:
			m.deliver()
		}
	}
}
