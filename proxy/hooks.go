package proxy

import "github.com/kvrouter/kvrouter/affinity"

// The features that join an inference exchange at some of its steps (the
// Responses API's stored responses, prefill/decode disaggregation, the
// prompt's tokens) are hooks: the exchange asks each, in the order New
// lists them, for the capabilities below, one small interface each, and a
// hook has only those it needs. The skeleton of an exchange (exchange.go)
// names no feature; a feature names no step it does not take.

// parsedHook sees an inference body once it is parsed, before its leg is
// planned, and may rewrite it or refuse it (ownership.parsed stamps the
// owner of a stored response into it).
type parsedHook interface {
	parsed(x *exchange) error
}

// legPlanner plans the leg of the exchanges it takes, over pool, the final
// role's candidates, with the session key: P/D's disaggregated requests,
// and the Responses API's requests that continue a stored response. ok
// false leaves x to the next planner, and after the last to the regular
// leg.
type legPlanner interface {
	planLeg(x *exchange, pool *affinity.Pool, key uint64) (l *leg, ok bool, err error)
}

// resumePlanner plans the leg that continues a stream its worker cut, with
// body, the continuation, over pool, the final role's candidates the stream
// has not used (P/D's decode leg resumes through a new prefill). ok false
// leaves it to the next, and after the last to the regular leg.
type resumePlanner interface {
	planResume(x *exchange, body []byte, pool *affinity.Pool, key uint64) (l *leg, ok bool, err error)
}

// requestAttacher adds to a request a router is about to decide on, over
// pool (the tokenizer attaches the prompt's token IDs).
type requestAttacher interface {
	attach(x *exchange, req *affinity.Request, pool *affinity.Pool)
}

// pickHearer hears that attempt a of leg l goes to its worker, before it
// is sent (preemption asks a borrower on that worker to give way).
type pickHearer interface {
	picked(x *exchange, l *leg, a *attempt)
}

// streamHearer hears that the answer of worker a is streamed to the client:
// its first bytes are in a.first.
type streamHearer interface {
	streamStarted(x *exchange, a *attempt)
}

// answerHearer hears a worker's whole answer, passed on to the client.
type answerHearer interface {
	heard(x *exchange, w affinity.WorkerID, status int, body []byte)
}

// finishHearer hears how an exchange ended, as the client saw it, once the
// recorder has written it down.
type finishHearer interface {
	finished(x *exchange, status int, cut bool)
}

// Compile-time guards: the features are hooks of the capabilities they
// are asked for.
var (
	_ parsedHook      = (*disaggregation)(nil)
	_ legPlanner      = (*disaggregation)(nil)
	_ finishHearer    = (*disaggregation)(nil)
	_ resumePlanner   = (*disaggregation)(nil)
	_ parsedHook      = (*ownership)(nil)
	_ legPlanner      = (*ownership)(nil)
	_ streamHearer    = (*ownership)(nil)
	_ answerHearer    = (*ownership)(nil)
	_ requestAttacher = (*tokenizer)(nil)
	_ streamHearer    = (*tokenizer)(nil)
	_ answerHearer    = (*tokenizer)(nil)
)

// hooks are the hooks of a proxy, sorted by capability once, in their
// order, so that an exchange asks only those that have one.
type hooks struct {
	parsedHooks []parsedHook
	planners    []legPlanner
	resumers    []resumePlanner
	attachers   []requestAttacher
	picks       []pickHearer
	streams     []streamHearer
	answers     []answerHearer
	finishes    []finishHearer
}

// newHooks sorts all, in order, by capability; a hook may have several.
func newHooks(all ...any) *hooks {
	h := &hooks{}
	for _, hook := range all {
		if c, ok := hook.(parsedHook); ok {
			h.parsedHooks = append(h.parsedHooks, c)
		}
		if c, ok := hook.(legPlanner); ok {
			h.planners = append(h.planners, c)
		}
		if c, ok := hook.(resumePlanner); ok {
			h.resumers = append(h.resumers, c)
		}
		if c, ok := hook.(requestAttacher); ok {
			h.attachers = append(h.attachers, c)
		}
		if c, ok := hook.(pickHearer); ok {
			h.picks = append(h.picks, c)
		}
		if c, ok := hook.(streamHearer); ok {
			h.streams = append(h.streams, c)
		}
		if c, ok := hook.(answerHearer); ok {
			h.answers = append(h.answers, c)
		}
		if c, ok := hook.(finishHearer); ok {
			h.finishes = append(h.finishes, c)
		}
	}
	return h
}

// parsed asks the parsed hooks in order; the first refusal refuses x.
func (h *hooks) parsed(x *exchange) error {
	for _, c := range h.parsedHooks {
		if err := c.parsed(x); err != nil {
			return err
		}
	}
	return nil
}

// planLeg asks the planners in order; the first that takes x plans it.
func (h *hooks) planLeg(x *exchange, pool *affinity.Pool, key uint64) (*leg, bool, error) {
	for _, c := range h.planners {
		if l, ok, err := c.planLeg(x, pool, key); ok {
			return l, true, err
		}
	}
	return nil, false, nil
}

// planResume asks the resume planners in order; the first that takes x
// plans its continuation.
func (h *hooks) planResume(x *exchange, body []byte, pool *affinity.Pool, key uint64) (*leg, bool, error) {
	for _, c := range h.resumers {
		if l, ok, err := c.planResume(x, body, pool, key); ok {
			return l, true, err
		}
	}
	return nil, false, nil
}

func (h *hooks) attach(x *exchange, req *affinity.Request, pool *affinity.Pool) {
	for _, c := range h.attachers {
		c.attach(x, req, pool)
	}
}

func (h *hooks) picked(x *exchange, l *leg, a *attempt) {
	for _, c := range h.picks {
		c.picked(x, l, a)
	}
}

func (h *hooks) streamStarted(x *exchange, a *attempt) {
	for _, c := range h.streams {
		c.streamStarted(x, a)
	}
}

func (h *hooks) heard(x *exchange, w affinity.WorkerID, status int, body []byte) {
	for _, c := range h.answers {
		c.heard(x, w, status, body)
	}
}

func (h *hooks) finished(x *exchange, status int, cut bool) {
	for _, c := range h.finishes {
		c.finished(x, status, cut)
	}
}
