package proxy

import "github.com/kvrouter/kvrouter/affinity"

// Health is what the proxy needs of worker health: whether a worker may get
// traffic, and a tracker per attempt that it reports outcomes to. Begin
// fails when the worker's circuit refuses the attempt (open, or half-open
// with its trial slots taken); the proxy then picks another worker.
type Health interface {
	Eligible(affinity.WorkerID) bool
	Begin(affinity.WorkerID) (Attempt, error)
}

// Attempt receives the outcome of one attempt on one worker.
type Attempt interface {
	// Progress reports response headers, a body read, or a stream chunk
	// carrying tokens (0 when unknown).
	Progress(tokens int)
	// End reports how the attempt ended; calls after the first do nothing.
	End(Outcome)
	// Stuck is closed when health judges the worker this attempt is on
	// wedged or hung; nil when it never will be. The proxy then abandons
	// the attempt: a request that has sent nothing to its client is tried
	// on another worker, a stream already started fails visibly.
	Stuck() <-chan struct{}
}

// stuckNotifier is an Attempt that runs a function when it becomes stuck,
// on a goroutine of its own: the proxy then keeps no goroutine per attempt
// waiting on Stuck.
type stuckNotifier interface {
	OnStuck(f func())
}

// Outcome is how an attempt ended, as the circuit breaker should see it.
type Outcome int

const (
	// Succeeded: the worker answered with a status below 500.
	Succeeded Outcome = iota
	// Failed: a 5xx, a connect error, a reset, a timeout, or a stuck exchange.
	Failed
	// Canceled: the client left or the router gave up; it says nothing
	// about the worker.
	Canceled
)

// outcomeName is how an attempt's span names its outcome.
func outcomeName(o Outcome) string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return "canceled"
}

// outcomeOf maps an upstream status to an Outcome.
func outcomeOf(status int) Outcome {
	if status >= 500 {
		return Failed
	}
	return Succeeded
}

// allHealthy is the health of a proxy that tracks none.
type allHealthy struct{}

func (allHealthy) Eligible(affinity.WorkerID) bool          { return true }
func (allHealthy) Begin(affinity.WorkerID) (Attempt, error) { return noAttempt{}, nil }

type noAttempt struct{}

func (noAttempt) Progress(int)           {}
func (noAttempt) End(Outcome)            {}
func (noAttempt) Stuck() <-chan struct{} { return nil }
