package proxy

import (
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// leg is one phase of a request: the workers it may go to, how one of them
// is chosen, what they are sent, and how many attempts it may take. A
// regular request is one leg; a disaggregated one is a prefill leg and a
// decode leg, and both run through the same attempts and retry policy.
type leg struct {
	phase  string // "" for a regular request, else RolePrefill or RoleDecode
	router *affinity.Router
	req    *affinity.Request
	pool   *affinity.Pool
	body   []byte
	// first is a worker chosen, and reserved, ahead of the leg (P/D picks
	// both workers up front); the leg's first attempt takes it.
	first *routed
	// picked is the leg's first attempt, picked ahead of it (the concurrent
	// P/D prefill, whose body names its worker); try runs it first.
	picked *attempt
	// attempts is the most attempts the leg may make, the first included.
	attempts int
	// stream: a 2xx answer to a streaming request is relayed as it comes,
	// not read whole first.
	stream bool
	// toClient: the leg's final answer is the client's; otherwise the
	// router reads it (a prefill's answer).
	toClient bool

	// pinned: the leg goes to one given worker (a stored response's
	// owner): no decision is counted for it.
	pinned bool

	// decider judges the leg's decisions (Deps.Decider); decided is what
	// its latest decision knew, judged by the answer to it.
	decider Decider
	decided core.Decided

	counted bool                // its cache outcome was counted
	failed  []affinity.WorkerID // workers tried, least recently failed first
}

// pin makes l a leg to the one worker r chose ahead of it: a single
// attempt, and no decision to count or judge.
func (l *leg) pin(r *routed) {
	l.first, l.pinned, l.attempts, l.decider = r, true, 1, nil
}

// routed is a worker chosen, and reserved, ahead of its leg.
type routed struct {
	dec   affinity.Decision
	guard *affinity.Guard
}

// choose selects the worker of the next attempt and reserves it. Untried
// candidates come first; once every candidate was tried, the least recently
// failed one is tried again.
func (l *leg) choose() (affinity.Decision, *affinity.Guard, error) {
	if r := l.first; r != nil {
		l.first = nil
		return r.dec, r.guard, nil
	}
	cand := l.pool.Without(l.failed...)
	if cand.Len() == 0 && len(l.failed) > 0 {
		cand = l.pool.Without(l.failed[1:]...)
	}
	return l.route(cand)
}

// failedOn records that an attempt on w failed: it goes to the back of the
// queue of workers to try again.
func (l *leg) failedOn(w affinity.WorkerID) {
	l.forget(w)
	l.failed = append(l.failed, w)
}

// exclude takes w out of the leg: its circuit refused an attempt.
func (l *leg) exclude(w affinity.WorkerID) {
	l.pool = l.pool.Without(w)
	l.forget(w)
}

func (l *leg) forget(w affinity.WorkerID) {
	for i, f := range l.failed {
		if f == w {
			l.failed = append(l.failed[:i], l.failed[i+1:]...)
			return
		}
	}
}

// release gives back a worker reserved ahead of the leg that no attempt
// took (the request ended before the leg ran).
func (l *leg) release() {
	if l.first != nil {
		l.first.guard.Release()
		l.first = nil
	}
}

// countsCacheOutcome reports whether the leg's policy routes by prefix, so
// its decisions are hits or misses; a least_load decode leg has neither.
func (l *leg) countsCacheOutcome() bool { return l.router.RoutesByPrefix() }
