package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Admission, as vllm-router does it: a token bucket of
// --max-concurrent-requests tokens that refills at
// --rate-limit-tokens-per-second (by default as many per second as it
// holds). A request takes a token; when none is left it waits in a queue of
// --queue-size places for one, and is answered 408 after
// --queue-timeout-secs, or 429 at once when the queue is full. Tokens refill
// with time, not when requests end: the bucket bounds the rate of
// admissions, not the requests in flight.
type admission struct {
	limiter *rate.Limiter // nil: every request is admitted
	queue   int64
	timeout time.Duration
	waiting atomic.Int64
}

// errQueueTimeout: a request waited --queue-timeout-secs for a token.
var errQueueTimeout = errors.New("timed out in the admission queue")

// Admission is what admission is configured with. A zero Capacity admits
// everything.
type Admission struct {
	Capacity     int           // --max-concurrent-requests, default 32768
	RefillPerSec float64       // --rate-limit-tokens-per-second; 0: Capacity per second
	QueueSize    int           // --queue-size, default 100; 0: no queue
	QueueTimeout time.Duration // --queue-timeout-secs, default 60 s
}

func newAdmission(c Admission) *admission {
	if c.Capacity <= 0 {
		return &admission{}
	}
	refill := c.RefillPerSec
	if refill <= 0 {
		refill = float64(c.Capacity)
	}
	return &admission{limiter: rate.NewLimiter(rate.Limit(refill), c.Capacity), queue: int64(c.QueueSize), timeout: c.QueueTimeout}
}

// admit takes a token, waiting for one in the queue when none is left.
func (a *admission) admit(ctx context.Context) error {
	if a.limiter == nil {
		return nil
	}
	r := a.limiter.Reserve()
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if a.waiting.Add(1) > a.queue {
		a.waiting.Add(-1)
		r.Cancel()
		return errorf(ErrTooManyRequests, "the router's admission queue is full (--queue-size %d)", a.queue)
	}
	defer a.waiting.Add(-1)
	t := time.NewTimer(min(d, a.timeout))
	defer t.Stop()
	select {
	case <-t.C:
		if d > a.timeout {
			r.Cancel()
			return errorf(errQueueTimeout, "no admission within --queue-timeout-secs (%v)", a.timeout)
		}
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ErrClientGone
	}
}
