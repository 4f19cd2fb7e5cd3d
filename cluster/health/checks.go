package health

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxConcurrentProbes bounds the probes in flight in one round, which bounds
// the sockets a round opens; a slow worker holds one slot and delays nobody
// else's verdict.
const maxConcurrentProbes = 256

// contactBase is the first wait before probing again a worker that has never
// answered its health endpoint; the wait doubles up to Interval.
const contactBase = time.Second

// prober sends the active checks and the recovery probes, and hands their
// answers to the judge with the times they were sent and answered. It
// decides nothing: which worker gets a first-contact check or a recovery
// probe is the judge's call (contactDue, wantGenerate). Safe for concurrent
// use; each worker has at most one check and one recovery probe in flight.
type prober struct {
	cfg    Config
	client workerClient
	judge  *judge
	now    func() int64 // the Monitor's timeline
	log    *slog.Logger
	probed probeNews // wakes AwaitProbed
}

// checkRound is one round of active checks (see Monitor.CheckNow), without
// the delivery of notifications.
func (p *prober) checkRound(ctx context.Context) error {
	slots := make(chan struct{}, maxConcurrentProbes)
	var wg sync.WaitGroup
	defer wg.Wait()
	round := p.judge.isolation.round.Add(1)
	for _, w := range p.judge.list() {
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
			p.checkOne(ctx, w, round)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// checkOne probes w once, in CheckNow's round (or, for a first contact,
// the latest round), and hands the answer to the judge.
func (p *prober) checkOne(ctx context.Context, w *worker, round uint64) {
	start := p.now()
	err := p.client.probe(ctx, w.target)
	if ctx.Err() != nil {
		return
	}
	if !p.judge.checked(w, err == nil, start, p.now(), round) {
		return
	}
	if err != nil {
		p.log.Debug("health probe failed", "worker", w.id, "url", w.url, "err", err)
	}
	p.probed.announce()
}

// checked applies an active check of w in round, sent at start and answered
// (well, or not) at now, and reports whether it counted. A failure that may
// be this replica's own doing (the probe overlapped a stall of this
// replica, or came while it heard no peer and no worker) is not counted.
func (j *judge) checked(w *worker, good bool, start, now int64, round uint64) bool {
	if !good && j.stalls.touched(start, now) {
		return false
	}
	if !good && j.isolation.probeIsolated(start, now, round) {
		j.isolation.noteCutOff()
		return false
	}
	if good {
		j.isolation.noteAnswer(now, round)
	}
	w.mu.Lock()
	ch := w.recordProbe(good, &j.cfg)
	if !w.everUp {
		w.contact.failed(now, contactBase.Nanoseconds(), j.cfg.Interval.Nanoseconds())
	}
	w.mu.Unlock()
	j.report(w, ch)
	return true
}

// contactDue reports whether w, never healthy, is due at now for another
// first-contact check.
func (j *judge) contactDue(w *worker, now int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.everUp && w.contact.due(now)
}
