package health

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// CheckNow runs one round of active checks: every watched worker whose previous
// probe has finished is probed, in parallel, and each result is applied as soon
// as it arrives, so a slow worker does not delay the others' verdicts. It
// returns when every probe of the round has finished (within Timeout), or early
// with ctx's error once ctx ends, after aborting the probes in flight; a probe
// cut short by ctx is not counted against its worker. It then delivers pending
// OnChange notifications. Checks never touch request accounting or load.
func (m *Monitor) CheckNow(ctx context.Context) error {
	defer m.notify.deliver()
	return m.prober.checkRound(ctx)
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
		case <-m.judge.isolation.recheck:
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
			now := m.now()
			m.judge.stalls.beat(now)
			m.judge.isolation.checkContact(now)
			m.Tick()
		case <-m.notify.wake:
			m.notify.deliver()
		}
		m.launch(ctx, wg, sem)
	}
}

// launch starts, without waiting, the background work that is due: a first
// contact probe of each worker that has never answered its health endpoint,
// and the engine scrapes and recovery probes that the last Tick asked for.
// Each task runs in a goroutine counted by wg and holds a slot of sem; a task
// that finds sem full waits for a later call. ctx ends them all.
func (m *Monitor) launch(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) {
	now := m.now()
	for _, w := range m.judge.list() {
		if m.judge.contactDue(w, now) {
			start(wg, sem, &w.checking, func() { m.prober.checkOne(ctx, w, m.judge.isolation.round.Load()) })
		}
		if w.wantScrape.Load() {
			start(wg, sem, &w.scraping, func() { m.engines.scrapeOne(ctx, w) })
		}
		if w.wantGenerate.Load() {
			start(wg, sem, &w.generating, func() { m.prober.recoverOne(ctx, w) })
		}
	}
}

// start runs fn in a goroutine of wg unless busy says one already runs or sem
// is full. busy is set while fn runs.
func start(wg *sync.WaitGroup, sem chan struct{}, busy *atomic.Bool, fn func()) {
	if !busy.CompareAndSwap(false, true) {
		return
	}
	select {
	case sem <- struct{}{}:
	default:
		busy.Store(false)
		return
	}
	wg.Go(func() {
		defer func() { busy.Store(false); <-sem }()
		fn()
	})
}
