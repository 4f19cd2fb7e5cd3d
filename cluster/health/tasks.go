package health

import (
	"context"
	"sync"
	"sync/atomic"
)

// launch starts, without waiting, the background work that is due: a first
// contact probe of each worker that has never answered its health endpoint,
// and the engine scrapes and recovery probes that the last Tick asked for.
// Each task runs in a goroutine counted by wg and holds a slot of sem; a task
// that finds sem full waits for a later call. ctx ends them all.
func (m *Monitor) launch(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) {
	now := m.now()
	for _, w := range m.workers.Load().list {
		if m.contactDue(w, now) {
			start(wg, sem, &w.checking, func() { m.checkOne(ctx, w, m.isolation.round.Load()) })
		}
		if w.wantScrape.Load() {
			start(wg, sem, &w.scraping, func() { m.scrapeOne(ctx, w) })
		}
		if w.wantGenerate.Load() {
			start(wg, sem, &w.generating, func() { m.recoverOne(ctx, w) })
		}
	}
}

// contactDue reports whether w, never healthy, is due for another probe.
func (m *Monitor) contactDue(w *worker, now int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.everUp && w.contact.due(now)
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

// runTasks launches the due tasks and waits for them, then delivers pending
// OnChange notifications: one round of what Run does in the background, for
// tests that drive the Monitor by hand.
func (m *Monitor) runTasks(ctx context.Context) {
	var wg sync.WaitGroup
	m.launch(ctx, &wg, make(chan struct{}, maxConcurrentProbes))
	wg.Wait()
	m.deliver()
}
