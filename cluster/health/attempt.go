package health

import (
	"fmt"
	"sync/atomic"
)

// Outcome is how a request to a worker ended, as the circuit breaker sees it.
type Outcome uint8

const (
	// OutcomeSuccess: the worker answered, with a 1xx-4xx status; a client's
	// mistake is not the worker's.
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: a 5xx, a connect error, a reset or a timeout.
	OutcomeFailure
	// OutcomeCanceled: the client or the router gave up; it says nothing about
	// the worker, so the breaker ignores it.
	OutcomeCanceled
)

// OutcomeOfStatus maps an upstream HTTP status to an Outcome: 5xx fail,
// everything else succeeds.
func OutcomeOfStatus(code int) Outcome {
	if code >= 500 {
		return OutcomeFailure
	}
	return OutcomeSuccess
}

// Attempt is one request (or one P/D phase) dispatched to one worker, from
// Begin to End. It feeds the breaker, progress detection and degrade
// detection, and tells the proxy through Stuck when it should give up on the
// worker. End must be called once the request is over, on every path; later
// calls do nothing. Progress, Stuck and End may be called from different
// goroutines. Methods on a nil *Attempt do nothing (Stuck returns a nil
// channel, which never fires), so a refused Begin needs no special casing
// downstream.
type Attempt struct {
	m       *Monitor // its clock, and its judge
	w       *worker
	gen     uint64 // breaker generation the attempt was admitted in
	trial   bool
	begunAt int64
	stuck   chan struct{} // closed when the attempt should be abandoned

	heardAt     atomic.Int64 // the latest Progress, or notSet
	firstAt     atomic.Int64 // the first Progress that carried tokens, or notSet
	firstTokens atomic.Int64 // tokens reported with that Progress
	tokens      atomic.Int64 // tokens reported in all
	ended       atomic.Bool

	// Guarded by w.mu.
	prev, next  *Attempt // in w.attempts while in flight
	stuckClosed bool
	onStuck     func() // run, on a goroutine of its own, when Stuck closes
	sliceAt     int64  // start of the rate slice Tick measures next, or notSet
	sliceTokens int64  // tokens at sliceAt
}

// begin admits one attempt at now (see Monitor.Begin). owner is the Monitor
// whose clock the Attempt's own methods read; the judge never calls it.
func (j *judge) begin(id WorkerID, now int64, owner *Monitor) (*Attempt, error) {
	w := j.lookup(id)
	if w == nil {
		return nil, fmt.Errorf("health: worker %d: %w", id, ErrUnknownWorker)
	}
	gen, trial, ok := w.admit()
	if !ok {
		return nil, fmt.Errorf("health: worker %d: %w", id, ErrCircuitOpen)
	}
	a := &Attempt{m: owner, w: w, gen: gen, trial: trial, begunAt: now, stuck: make(chan struct{}), sliceAt: notSet}
	a.heardAt.Store(notSet)
	a.firstAt.Store(notSet)
	w.mu.Lock()
	if w.inflight.Load() == 0 {
		// A worker that was idle starts its silence clock now, not at its last
		// progress before it went idle.
		w.noteProgress(now)
	}
	w.inflight.Add(1)
	w.attempts.push(a)
	w.mu.Unlock()
	return a, nil
}

// Worker returns the worker the attempt went to.
func (a *Attempt) Worker() WorkerID {
	if a == nil {
		return 0
	}
	return a.w.id
}

// Trial reports whether the attempt holds a half-open circuit's trial slot.
func (a *Attempt) Trial() bool { return a != nil && a.trial }

// Stuck returns a channel that is closed when the attempt should be given up
// on: this replica judged its worker wedged, the worker failed its health
// checks before the attempt heard anything from it (the worker hangs), or the
// attempt itself saw no progress (its own, or the engine's as scraped from
// /metrics) for WedgeTimeout. A proxy that has sent nothing to the client yet
// selects on it, cancels the upstream request and retries elsewhere. The
// channel is closed by Tick (or by the active check that finds the worker
// hung), never by End. A nil Attempt returns nil.
func (a *Attempt) Stuck() <-chan struct{} {
	if a == nil {
		return nil
	}
	return a.stuck
}

// Progress reports that the worker delivered something: the response headers,
// a body read, a stream chunk. tokens is the number of generated tokens the
// chunk carried, 0 when unknown (headers, a non-streamed body). The decode rate
// used by degrade detection starts at the first Progress that carries tokens,
// over the tokens reported after it.
func (a *Attempt) Progress(tokens int) {
	if a == nil || a.ended.Load() {
		return
	}
	a.progress(tokens, a.m.now())
}

// progress records, for the judge, a Progress of tokens at now.
func (a *Attempt) progress(tokens int, now int64) {
	n := int64(max(tokens, 0))
	if n > 0 && a.firstAt.CompareAndSwap(notSet, now) {
		a.firstTokens.Store(n)
	}
	a.tokens.Add(n)
	a.heardAt.Store(now)
	a.w.noteHeard(now)
}

// End closes the attempt with its outcome. Only the first call counts: the
// breaker and the in-flight count see each attempt exactly once. A successful
// end counts as progress. A trial whose token rate is degraded against the
// worker's peers counts as a failure and renews the degrade verdict, so a slow
// worker cannot close its circuit. A failure that may have been this
// replica's own doing (the attempt overlapped a stall of this replica) says
// nothing about the worker, and the breaker ignores it.
func (a *Attempt) End(o Outcome) {
	if a == nil || !a.ended.CompareAndSwap(false, true) {
		return
	}
	a.m.judge.ended(a, o, a.m.now())
}

// ended applies the outcome of a at now (see Attempt.End); a has not ended
// before.
func (j *judge) ended(a *Attempt, o Outcome, now int64) {
	w := a.w
	touched := j.stalls.touched(a.begunAt, now)
	if o == OutcomeFailure && (touched || j.isolation.isolated(a.begunAt, now)) {
		o = OutcomeCanceled
	}
	rate, sampled := a.rate(now)
	slowTrial := sampled && !touched && a.trial && o == OutcomeSuccess && j.degrade.tooSlow(w, rate)
	if slowTrial {
		o = OutcomeFailure
	}
	w.mu.Lock()
	w.attempts.remove(a)
	switch left := w.inflight.Add(-1); {
	case o == OutcomeSuccess:
		w.noteHeard(now) // completion is progress
	case left == 0:
		w.noteProgress(now) // a worker left idle is not silent
	}
	if !touched {
		j.degrade.lastSample(w, a, now, rate, sampled)
	}
	ch := w.recordOutcome(o, a.gen, a.trial, now)
	if slowTrial {
		ch |= w.renewDegraded(now)
	}
	w.mu.Unlock()
	j.report(w, ch)
}

// rate is the attempt's decode rate in tokens per second since its first
// token-carrying Progress, if it delivered enough tokens after that to
// measure one.
func (a *Attempt) rate(now int64) (float64, bool) {
	first := a.firstAt.Load()
	if first == notSet || now <= first {
		return 0, false
	}
	n := a.tokens.Load() - a.firstTokens.Load()
	if n < minRateTokens {
		return 0, false
	}
	return float64(n) / (float64(now-first) / 1e9), true
}

// closeStuck closes the Stuck channel once, and starts the OnStuck function.
// Caller holds w.mu.
func (a *Attempt) closeStuck() {
	if !a.stuckClosed {
		a.stuckClosed = true
		close(a.stuck)
		if a.onStuck != nil {
			go a.onStuck()
		}
	}
}

// OnStuck makes f run, on a goroutine of its own, when the Stuck channel
// closes (at once if it is closed already): a proxy need not keep a
// goroutine per attempt waiting on the channel. f may still run after End,
// when the two cross. A nil Attempt never runs f.
func (a *Attempt) OnStuck(f func()) {
	if a == nil {
		return
	}
	a.w.mu.Lock()
	defer a.w.mu.Unlock()
	a.onStuck = f
	if a.stuckClosed {
		go f()
	}
}

// heardSince is when the attempt last heard from its worker: its latest
// Progress, or its start. Lock-free.
func (a *Attempt) heardSince() int64 {
	if h := a.heardAt.Load(); h != notSet {
		return h
	}
	return a.begunAt
}

// attemptList is a worker's attempts in flight, linked through the attempts
// themselves so that Begin and End neither allocate nor search. Not safe for
// concurrent use: the worker's mutex guards it.
type attemptList struct {
	head *Attempt
	n    int
}

func (l *attemptList) push(a *Attempt) {
	a.next = l.head
	if l.head != nil {
		l.head.prev = a
	}
	l.head = a
	l.n++
}

func (l *attemptList) remove(a *Attempt) {
	if a.prev != nil {
		a.prev.next = a.next
	} else if l.head == a {
		l.head = a.next
	} else {
		return // not in the list
	}
	if a.next != nil {
		a.next.prev = a.prev
	}
	a.prev, a.next = nil, nil
	l.n--
}

// each calls fn for every attempt in flight.
func (l *attemptList) each(fn func(*Attempt)) {
	for a := l.head; a != nil; a = a.next {
		fn(a)
	}
}
