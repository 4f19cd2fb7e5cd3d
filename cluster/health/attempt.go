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
// Begin to End. It feeds the breaker and progress detection. End must be
// called once the request is over, on every path; later calls do nothing.
// Progress and End may be called from different goroutines. Methods on a nil
// *Attempt do nothing, so a refused Begin needs no special casing downstream.
type Attempt struct {
	m           *Monitor
	w           *worker
	gen         uint64 // breaker generation the attempt was admitted in
	trial       bool
	firstAt     atomic.Int64 // time of the first Progress, or notSet
	firstTokens atomic.Int64 // tokens reported with the first Progress
	tokens      atomic.Int64 // tokens reported in all
	ended       atomic.Bool
}

// Begin admits one request to worker id and returns its Attempt. It fails with
// ErrUnknownWorker, or with ErrCircuitOpen when the circuit is open or half-open
// with every trial slot taken; the proxy should then select another worker. In
// a half-open circuit the Attempt holds a trial slot until End. Begin gates only
// on the circuit: unhealthy workers and verdicts are for the selector to skip
// through Eligible. Cheap: a closed circuit costs atomics and one allocation.
func (m *Monitor) Begin(id WorkerID) (*Attempt, error) {
	w := m.lookup(id)
	if w == nil {
		return nil, fmt.Errorf("health: worker %d: %w", id, ErrUnknownWorker)
	}
	gen, trial, ok := w.admit()
	if !ok {
		return nil, fmt.Errorf("health: worker %d: %w", id, ErrCircuitOpen)
	}
	if w.inflight.Load() == 0 {
		// A worker that was idle starts its silence clock now, not at its last
		// progress before it went idle.
		w.noteProgress(m.now())
	}
	w.inflight.Add(1)
	a := &Attempt{m: m, w: w, gen: gen, trial: trial}
	a.firstAt.Store(notSet)
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

// Progress reports that the worker delivered something: the response's first
// byte, or a stream chunk. tokens is the number of generated tokens the chunk
// carried, 0 when unknown; the token rate used by degrade detection is measured
// from the first Progress to End over the tokens reported after the first one.
func (a *Attempt) Progress(tokens int) {
	if a == nil || a.ended.Load() {
		return
	}
	now := a.m.now()
	n := int64(max(tokens, 0))
	if a.firstAt.CompareAndSwap(notSet, now) {
		a.firstTokens.Store(n)
	}
	a.tokens.Add(n)
	a.w.noteProgress(now)
}

// End closes the attempt with its outcome. Only the first call counts: the
// breaker and the in-flight count see each attempt exactly once. A successful
// end counts as progress. A trial whose token rate is degraded against the
// worker's peers counts as a failure, so a slow worker cannot close its circuit.
func (a *Attempt) End(o Outcome) {
	if a == nil || !a.ended.CompareAndSwap(false, true) {
		return
	}
	m, w := a.m, a.w
	now := m.now()
	if left := w.inflight.Add(-1); o == OutcomeSuccess || left == 0 {
		// Completion is progress; and a worker left idle is not silent.
		w.noteProgress(now)
	}
	rate, sampled := a.rate(now)
	if sampled && a.trial && o == OutcomeSuccess && m.tooSlow(w, rate) {
		o = OutcomeFailure
	}
	w.mu.Lock()
	if sampled {
		w.rates.add(now, rate)
	}
	ch := w.recordOutcome(o, a.gen, a.trial, now)
	w.mu.Unlock()
	m.report(w, ch)
}

// rate is the attempt's decode rate in tokens per second, if it delivered
// enough tokens after its first byte to measure one.
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
