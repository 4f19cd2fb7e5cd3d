package proxy

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// sender sends a leg's attempts, the one retry policy of the request path:
// it picks each attempt's worker through its circuit, makes the attempt,
// reads a whole answer or goes live with a stream, and retries with backoff
// before the first byte reached the client. Safe for concurrent use.
type sender struct {
	fleet       *Fleet
	health      Health
	metrics     *pathmetrics.Metrics
	retry       Retry
	maxResponse int // Config.MaxResponseSize: the largest whole answer read
}

// try runs the attempts of leg l, the one retry policy of the request path,
// until one answers for good: a response to relay (live), a whole answer
// (ans), or, when no worker answered at all, the router's own error.
//
// An attempt is retried, on another worker while there are untried ones,
// when it failed before any byte reached the client: a connect error, a
// broken or stuck exchange, or a retryable status (408, 429, 500, 502, 503,
// 504). A retryable answer is kept while further attempts are made and is
// what the client gets, unchanged, if none of them does better. No attempt
// starts once the request's deadline has passed.
func (s *sender) try(x *exchange, l *leg) (live *attempt, ans *answer, err error) {
	var kept *answer
	for n := 0; n < l.attempts; n++ {
		if n > 0 {
			if err = s.pause(x, n); err != nil {
				break
			}
		}
		a, perr := l.picked, error(nil)
		if l.picked = nil; a == nil {
			a, perr = s.pick(x, l)
		}
		if perr != nil {
			if err == nil || kept == nil {
				err = perr
			}
			break
		}
		if n > 0 {
			s.metrics.Retries.Inc()
		}
		x.path.hooks.picked(x, l, a)
		live, ans, err = s.run(a, l, n == l.attempts-1)
		switch {
		case live != nil || ans != nil && !ans.retryable:
			if ans != nil && retryableStatus(ans.status) {
				s.metrics.RetriesExhausted.Inc() // the last attempt's answer, a failure too
			}
			return live, ans, nil
		case ans != nil:
			kept, err = ans, nil
		case !retryable(err):
			return nil, nil, err
		}
		l.failedOn(a.m.ID)
		if n == l.attempts-1 {
			s.metrics.RetriesExhausted.Inc()
		}
	}
	if kept != nil {
		return nil, kept, nil
	}
	return nil, nil, err
}

// run makes attempt a and classifies how it went. On the leg's last
// attempt a retryable status is final: it is passed on, not kept.
func (s *sender) run(a *attempt, l *leg, last bool) (live *attempt, ans *answer, err error) {
	if err := a.send(l.body); err != nil {
		o, e := a.failure(err)
		a.end(o, false)
		return nil, nil, e
	}
	status := a.status()
	switch {
	case retryableStatus(status) && !last:
		ans, err = s.keepAnswer(a)
		if ans != nil {
			ans.retryable = true
		}
		return nil, ans, err
	case l.stream && status/100 == 2 && hasBody(status) && (a.x.in.Stream || isEventStream(a)):
		return s.goLive(a)
	case l.toClient:
		ans, err = s.finalAnswer(a)
		return nil, ans, err
	}
	ans, err = s.keepAnswer(a)
	return nil, ans, err
}

func isEventStream(a *attempt) bool {
	return bytes.HasPrefix(a.resp.Header.ContentType(), []byte("text/event-stream"))
}

// retryable reports whether an attempt's failure is worth another attempt:
// not when the client left, the router gave up, or the answer was refused
// as too large.
func retryable(err error) bool {
	var abort *failure.Abort
	return !failure.IsGone(err) && !errors.As(err, &abort) && !errors.Is(err, failure.ErrAnswerTooLarge)
}

// retryableStatus are the statuses that, before any byte reached the client,
// send the request to another worker.
func retryableStatus(code int) bool {
	switch code {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// pause waits before retry number n (n >= 1): exponential backoff with
// jitter. It fails, without waiting, when the deadline would pass before
// the next attempt could start, and when the client leaves meanwhile.
func (s *sender) pause(x *exchange, n int) error {
	d := s.backoff(n)
	if time.Now().Add(d).After(x.deadline) {
		return failure.Errorf(failure.ErrUpstreamTimeout, "no worker answered within the request timeout")
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-x.life.Done():
		return x.life.why()
	}
}

// backoff is the wait before retry number n: the initial backoff times
// the multiplier to the n-1, capped, with jitter.
func (s *sender) backoff(n int) time.Duration {
	r := s.retry
	d := float64(r.InitialBackoff)
	for range n - 1 {
		d *= r.Multiplier
	}
	d = min(d, float64(r.MaxBackoff))
	return time.Duration(d * (1 + r.Jitter*(2*rand.Float64()-1)))
}
