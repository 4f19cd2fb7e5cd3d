package main

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/sim"
)

// errDriverStopped fails the requests in flight when the worker shuts down.
var errDriverStopped = errors.New("workersim: engine stopped")

// driver runs a sim.Engine in real time. One goroutine owns the engine; handlers hand it work
// over a channel and read its events from their tickets. Engine time is wall time since start
// multiplied by the time scale; while wedged, engine time stands still, so nothing progresses.
type driver struct {
	clock clock.Clock
	scale float64
	work  chan func()
	stop  chan struct{}
	done  chan struct{}
	stats engineStats

	// Owned by the run goroutine.
	engine   *sim.Engine
	retired  engineTotals // counters of engines replaced by ResetPrefixCache
	pooled   uint64       // engine tokens of pooling passes, kept out of the generated count
	tickets  map[sim.RequestID]*ticket
	nextID   sim.RequestID
	wedged   bool
	base     time.Duration // engine time at wallBase
	wallBase time.Time
	kv       *kvEventPublisher // nil unless the engine's cache events are published
	latency  *engineLatency    // nil until the worker's metrics exist
	changes  []sim.CacheEvent
}

// submission is what a handler asks the engine to run.
type submission struct {
	prompt       []byte
	maxTokens    int
	streamTokens bool
	remoteTokens int
	priority     int // vLLM's priority: lower first, under --scheduling-policy priority
	// pooled marks a pooling pass (embeddings, rerank): the engine runs it
	// as a one-token generation, but vLLM counts no generated token for it.
	pooled bool
	// adapter is the LoRA adapter it runs with ("" for a base model), salt
	// its cache_salt.
	adapter, salt string
	// output draws the text it generates, so that the engine caches it after the prompt
	// (sim.Request.Output); nil for none.
	output func(dst []byte, n int) []byte
}

// newDriver starts the goroutine that owns a new engine; Stop ends it.
func newDriver(cfg sim.Config, scale float64, clk clock.Clock) *driver {
	return newPublishingDriver(cfg, scale, clk, nil)
}

// newPublishingDriver is newDriver whose engine's cache changes go to kv (nil: nowhere).
func newPublishingDriver(cfg sim.Config, scale float64, clk clock.Clock, kv *kvEventPublisher) *driver {
	d := &driver{
		kv:       kv,
		clock:    clk,
		scale:    scale,
		work:     make(chan func()),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		engine:   sim.NewEngine(cfg),
		tickets:  make(map[sim.RequestID]*ticket),
		wallBase: clk.Now(),
	}
	d.publish()
	go d.run()
	return d
}

// Stop fails every request in flight and waits for the engine goroutine to end. Idempotent.
func (d *driver) Stop() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// call runs fn on the engine goroutine and waits for it. The stats are published before it
// returns, so a caller that submitted or cancelled sees the engine's counts with that done.
func (d *driver) call(fn func()) error {
	finished := make(chan struct{})
	select {
	case d.work <- func() { fn(); d.publish(); close(finished) }:
	case <-d.done:
		return errDriverStopped
	}
	<-finished
	return nil
}

// Submit queues a request and returns the ticket its events arrive on.
func (d *driver) Submit(s submission) (*ticket, error) {
	ts, err := d.SubmitAll([]submission{s})
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

// SubmitAll queues the requests of one job at the same engine instant, as simultaneous arrivals,
// and returns their tickets in order. When one is refused, none stays queued.
func (d *driver) SubmitAll(subs []submission) ([]*ticket, error) {
	var ts []*ticket
	var err error
	if cerr := d.call(func() { ts, err = d.submitAll(subs) }); cerr != nil {
		return nil, cerr
	}
	return ts, err
}

// Cancel drops a request; it reports whether the engine still had it unfinished.
func (d *driver) Cancel(t *ticket) bool {
	cancelled := false
	_ = d.call(func() {
		delete(d.tickets, t.id)
		cancelled = d.engine.Cancel(t.id, d.catchUp())
	})
	return cancelled
}

// SetSlowdown sets the engine's slowdown factor from its next step on.
func (d *driver) SetSlowdown(f float64) error {
	var err error
	if cerr := d.call(func() { err = d.engine.SetSlowdown(f) }); cerr != nil {
		return cerr
	}
	return err
}

// SetWedged freezes or resumes engine time.
func (d *driver) SetWedged(wedged bool) {
	_ = d.call(func() { d.setWedged(wedged) })
}

// Config returns the engine's current configuration.
func (d *driver) Config() sim.Config {
	var c sim.Config
	_ = d.call(func() { c = d.engine.Config() })
	return c
}

func (d *driver) run() {
	defer close(d.done)
	for {
		d.advance()
		timer := d.armTimer()
		var fired <-chan time.Time
		if timer != nil {
			fired = timer.C()
		}
		select {
		case fn := <-d.work:
			fn()
		case <-fired:
		case <-d.stop:
			d.failAll()
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (d *driver) submitAll(subs []submission) ([]*ticket, error) {
	now := d.catchUp()
	ts := make([]*ticket, 0, len(subs))
	for _, s := range subs {
		t, err := d.submit(s, now)
		if err != nil {
			for _, t := range ts {
				delete(d.tickets, t.id)
				d.engine.Cancel(t.id, now)
			}
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

func (d *driver) submit(s submission, now time.Duration) (*ticket, error) {
	d.nextID++
	r := sim.Request{ID: d.nextID, Prompt: s.prompt, MaxTokens: s.maxTokens,
		StreamTokens: s.streamTokens, RemotePrefillTokens: s.remoteTokens, Priority: s.priority,
		Adapter: s.adapter, Salt: s.salt, Output: s.output}
	if err := d.engine.Submit(r, now); err != nil {
		return nil, err
	}
	t := newTicket(r.ID)
	t.pooled = s.pooled
	t.arrived = now
	d.tickets[r.ID] = t
	return t, nil
}

func (d *driver) advance() {
	d.catchUp()
	d.publish()
}

// catchUp delivers every event due by the current engine time, which it returns, so that a
// submission or cancellation lands on an up-to-date engine. The stats are published before the
// events reach their handlers, so a client that has its answer never sees the engine still
// running its request.
func (d *driver) catchUp() time.Duration {
	now := d.engineNow()
	if !d.wedged {
		events := d.engine.Advance(now)
		d.publishCacheChanges()
		d.countPooled(events)
		d.publish()
		d.dispatch(events)
	}
	return now
}

// countPooled counts the one token of every pooling pass that just got it.
func (d *driver) countPooled(events []sim.Event) {
	for _, ev := range events {
		if t, ok := d.tickets[ev.ID]; ok && t.pooled && ev.Kind == sim.FirstToken {
			d.pooled++
		}
	}
}

func (d *driver) dispatch(events []sim.Event) {
	for _, ev := range events {
		t, ok := d.tickets[ev.ID]
		if !ok {
			continue
		}
		t.push(ev)
		d.observe(t, ev)
		if ev.Kind == sim.Done {
			delete(d.tickets, ev.ID)
		}
	}
}

// observe records a ticket's first token and end in the engine's latency histograms.
func (d *driver) observe(t *ticket, ev sim.Event) {
	if d.latency == nil {
		return
	}
	took := (ev.At - t.arrived).Seconds() / d.scale
	switch {
	case ev.Kind == sim.FirstToken && !t.pooled:
		d.latency.firstToken.Update(took)
	case ev.Kind == sim.Done:
		d.latency.e2e.Update(took)
	}
}

// SetLatency has the engine's per-request latencies recorded in l from now on.
func (d *driver) SetLatency(l *engineLatency) {
	_ = d.call(func() { d.latency = l })
}

// armTimer returns a timer for the engine's next event, or nil when there is none to wait for.
func (d *driver) armTimer() clock.Timer {
	at, ok := d.engine.NextEventAt()
	if !ok || d.wedged {
		return nil
	}
	// One reading of the clock for the engine's now, and the timer armed right after it: on the
	// wall clock it is late by the nanoseconds in between. (Tests that move a fake clock wait for
	// the timer to be armed first, or run in a synctest bubble where nothing moves meanwhile.)
	wall := d.clock.Now()
	// Round up: waking a nanosecond early would find nothing due and spin.
	wait := time.Duration(math.Ceil(float64(at-d.engineNowAt(wall)) / d.scale))
	return d.clock.NewTimer(max(wait, 0))
}

func (d *driver) engineNow() time.Duration {
	return d.engineNowAt(d.clock.Now())
}

// engineNowAt is the engine time at the wall-clock instant wall.
func (d *driver) engineNowAt(wall time.Time) time.Duration {
	if d.wedged {
		return d.base
	}
	return d.base + time.Duration(float64(wall.Sub(d.wallBase))*d.scale)
}

func (d *driver) setWedged(wedged bool) {
	if wedged == d.wedged {
		return
	}
	if wedged {
		d.base = d.engineNow()
	} else {
		d.wallBase = d.clock.Now()
	}
	d.wedged = wedged
}

// ResetPrefixCache empties the engine's prefix cache, as vLLM's /reset_prefix_cache and
// SGLang's /flush_cache do. Like them it refuses, reporting false, while requests are running or
// waiting, whose blocks are in use. The engine is replaced by an empty one of the same
// configuration (its current slowdown included); the monotonic counters carry over.
func (d *driver) ResetPrefixCache() bool {
	reset := false
	_ = d.call(func() { reset = d.resetPrefixCache() })
	return reset
}

func (d *driver) resetPrefixCache() bool {
	d.catchUp()
	e := d.engine
	if e.Running() > 0 || e.Waiting() > 0 {
		return false
	}
	d.retired = d.totals()
	d.engine = sim.NewEngine(e.Config())
	if d.kv != nil {
		d.kv.cleared(d.clock.Now())
	}
	return true
}

// publishCacheChanges sends what the engine's cache did since the last call, as one batch: a
// vLLM engine publishes once a step.
func (d *driver) publishCacheChanges() {
	if d.kv == nil {
		return
	}
	d.changes = d.engine.TakeCacheEvents(d.changes[:0])
	if len(d.changes) > 0 {
		d.kv.changed(d.clock.Now(), d.changes)
	}
}

func (d *driver) failAll() {
	for id, t := range d.tickets {
		t.fail(errDriverStopped)
		delete(d.tickets, id)
	}
}

// engineStats is the snapshot of engine counters the metrics read, refreshed by the engine
// goroutine after every change. Safe for concurrent use.
type engineStats struct {
	running, waiting            atomic.Int64
	kvUsageBits                 atomic.Uint64
	prefixQueries, prefixHits   atomic.Uint64
	computedTokens, transferred atomic.Uint64
	generated                   atomic.Uint64
	preemptions                 atomic.Uint64
	numGPUBlocks                atomic.Int64
	loraLoads                   atomic.Uint64
	loraAdapters                atomic.Pointer[[2][]string] // running, waiting
}

// adapters are the adapters of the running and the waiting requests.
func (s *engineStats) adapters() (running, waiting []string) {
	if a := s.loraAdapters.Load(); a != nil {
		return a[0], a[1]
	}
	return nil, nil
}

func (d *driver) publish() {
	e := d.engine
	d.stats.running.Store(int64(e.Running()))
	d.stats.waiting.Store(int64(e.Waiting()))
	d.stats.kvUsageBits.Store(math.Float64bits(e.KVUsage()))
	t := d.totals()
	d.stats.prefixQueries.Store(t.prefixQueries)
	d.stats.prefixHits.Store(t.prefixHits)
	d.stats.computedTokens.Store(t.computedTokens)
	d.stats.transferred.Store(t.transferred)
	d.stats.generated.Store(t.generated - d.pooled)
	d.stats.preemptions.Store(t.preemptions)
	d.stats.numGPUBlocks.Store(int64(e.NumGPUBlocks()))
	d.stats.loraLoads.Store(t.loraLoads)
	d.publishAdapters()
}

// publishAdapters publishes the engine's running and waiting adapters when they changed.
func (d *driver) publishAdapters() {
	if d.engine.Config().MaxLoras == 0 {
		return
	}
	running, waiting := d.engine.RunningAdapters(), d.engine.WaitingAdapters()
	if r, w := d.stats.adapters(); d.stats.loraAdapters.Load() != nil && slices.Equal(r, running) && slices.Equal(w, waiting) {
		return
	}
	d.stats.loraAdapters.Store(&[2][]string{running, waiting})
}

// engineTotals are the engine's monotonic counters.
type engineTotals struct {
	prefixQueries, prefixHits, computedTokens, transferred, generated, preemptions, loraLoads uint64
}

// totals are the counters since start, over every engine the driver ran.
func (d *driver) totals() engineTotals {
	e, r := d.engine, d.retired
	return engineTotals{
		prefixQueries:  r.prefixQueries + e.PrefixQueries(),
		prefixHits:     r.prefixHits + e.PrefixHits(),
		computedTokens: r.computedTokens + e.ComputedTokens(),
		transferred:    r.transferred + e.TransferredTokens(),
		generated:      r.generated + e.GeneratedTokens(),
		preemptions:    r.preemptions + e.Preemptions(),
		loraLoads:      r.loraLoads + e.LoraLoads(),
	}
}

func (s *engineStats) kvUsage() float64 { return math.Float64frombits(s.kvUsageBits.Load()) }
