package core

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// The placement protocol (place.go says why there is a placer), as one
// object that both drivers run: Placement. A request that is cold here is
// put to the placer as a question (Begin); the answer places it
// (Answered), a refusal or no answer in time has the replica decide alone
// (Refused, Silent); the placer decides a peer's question (Serve) and
// holds the reservation until the asker's report counts it or the bound
// passes (Unhold). The driver only moves messages and time: the router
// puts the question over the cluster port and waits for it on the wall
// clock, the fleet simulator carries it on virtual time and may lose the
// answer; the protocol's choices, and its clock (the replica's), are the
// same in both.

// DefaultPlacerTimeout is PlacementConfig.Timeout when unset: how long an
// asker waits for the placer's answer before it decides alone.
const DefaultPlacerTimeout = 50 * time.Millisecond

// PlacerPatience is how many times Timeout an asker waits for the answer
// when the placer answered one of its questions within the last
// PlacerQuiet (it is alive, and a question that meets a queue there, a
// burst of new sessions on a loaded host whose answers come tens of
// milliseconds apart, is worth an answer a little later more than a
// decision on this replica's view alone), or has not answered one yet (a
// tier's first burst, or the first after an election, meets the placer
// cold, and one unanswered question would make every cold request of the
// next PlacerQuiet decide alone).
// Through 4 and 8 replicas on two cores, up to 82 of a first burst of 128
// new sessions were decided alone, up to 22 on one worker of 8; none in 13
// rounds with it, every question answered within 100 ms (BENCHMARKS.md).
const PlacerPatience = 3

// PlacerQuiet is how long an asker whose placer did not answer (no answer
// in time, a refused or broken connection) decides alone before it asks
// that placer again: a placer that froze or fell off the network would
// otherwise cost every cold request the whole timeout until the tier
// chooses another. A new placer is asked at once.
const PlacerQuiet = time.Second

// ErrNotPlacer: a replica asked to place is not the tier's placer, so that
// an asker whose view of the placer is stale decides alone rather than on
// a second view.
var ErrNotPlacer = errors.New("not the tier's placer")

// PlacementConfig is who the tier's placer is, as the driver knows it.
type PlacementConfig struct {
	// IsPlacer reports whether this replica is the tier's placer (the
	// Raft leader in the router, replica 0 in the simulator). Required.
	IsPlacer func() bool
	// Placer is the placer's address, what a question is put to; "" while
	// there is none. Required.
	Placer func() string
	// Timeout bounds a question: past it without an answer the driver
	// calls Silent. Default DefaultPlacerTimeout; PlacerPatience times it
	// while the placer answers (Asking.Deadline says which).
	Timeout time.Duration
}

// Placement is a replica's side of the placement protocol, on the
// replica's clock (Config.Clock). Safe for concurrent use.
type Placement struct {
	r   *Replica
	cfg PlacementConfig
	// silent is the last placer that did not answer, nil when none.
	silent atomic.Pointer[unanswered]
	// heard is the last answer from a placer, nil before the first.
	heard atomic.Pointer[answered]
}

// unanswered is a placer that did not answer, and until when it is not
// asked.
type unanswered struct {
	addr  string
	until time.Time
}

// answered is when the placer at addr last answered a question.
type answered struct {
	addr string
	at   time.Time
}

// Asking is one cold request while its question is with the placer.
type Asking struct {
	// Question is what to put to the placer at To, by Deadline.
	Question Question
	To       string
	Deadline time.Time
	start    time.Time
	router   *affinity.Router
	req      *affinity.Request
	pool     *affinity.Pool
	ended    bool
}

// Ended reports whether Answered, Refused or Silent ended a: an answer that
// arrives after it is not waited for.
func (a *Asking) Ended() bool { return a.ended }

// NewPlacement is r's side of the placement protocol.
func (r *Replica) NewPlacement(cfg PlacementConfig) (*Placement, error) {
	if cfg.IsPlacer == nil || cfg.Placer == nil {
		return nil, errors.New("core: a placement needs to know who the placer is")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultPlacerTimeout
	}
	return &Placement{r: r, cfg: cfg}, nil
}

// Begin starts deciding req. A request that is not cold here, one this
// replica places as the placer, and a cold one with no placer to ask (none,
// or one silent within PlacerQuiet) are decided at once: a nil *Asking and
// the decision. Otherwise the *Asking holds the question for the placer,
// and the caller ends it with Answered, Refused or Silent.
func (p *Placement) Begin(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (*Asking, Decided, *affinity.Guard, error) {
	switch p.r.decide.placingOf(router, req, pool, p.cfg.IsPlacer()) {
	case decideHere:
		d, g, err := p.r.Decide(router, req, pool)
		return nil, d, g, err
	case placeHere:
		d, g, err := p.r.decide.place(router, req, pool)
		d.Via = ViaPlacer
		return nil, d, g, err
	}
	to := p.cfg.Placer()
	if to == "" || p.quiet(to) {
		d, g, err := p.alone(router, req, pool)
		return nil, d, g, err
	}
	now := p.r.cfg.Clock.Now()
	return &Asking{Question: p.ask(req, pool), To: to, Deadline: now.Add(p.wait(to, now)), start: now,
		router: router, req: req, pool: pool}, Decided{}, nil, nil
}

// wait is how long a question put to the placer at addr now waits for its
// answer: PlacerPatience times Timeout when that placer answered within
// the last PlacerQuiet, or has not been heard from yet (a tier's first
// burst, or the first after an election, which the placer meets cold),
// otherwise Timeout.
func (p *Placement) wait(addr string, now time.Time) time.Duration {
	if h := p.heard.Load(); h == nil || h.addr != addr || now.Sub(h.at) < PlacerQuiet {
		return PlacerPatience * p.cfg.Timeout
	}
	return p.cfg.Timeout
}

// quiet reports whether the placer at addr did not answer within the last
// PlacerQuiet.
func (p *Placement) quiet(addr string) bool {
	s := p.silent.Load()
	return s != nil && s.addr == addr && p.r.cfg.Clock.Now().Before(s.until)
}

// Answered decides a on the worker the placer chose, recorded here as this
// replica's own decision, as learned from a peer when the placer predicted
// a hit; a worker that is no candidate here has a decided alone.
func (p *Placement) Answered(a *Asking, placed affinity.Decision) (Decided, *affinity.Guard, error) {
	p.heard.Store(&answered{addr: a.To, at: p.r.cfg.Clock.Now()})
	defer p.end(a) // after the reservation, whoever made it
	d, g, err := p.r.decide.decideOn(a.router, a.req, a.pool, placed)
	if err != nil {
		return p.alone(a.router, a.req, a.pool)
	}
	d.Via = ViaAsked
	return d, g, nil
}

// Refused decides a alone: the placer answered, but placed nothing (it no
// longer leads, no candidate, an answer that cannot be read).
func (p *Placement) Refused(a *Asking) (Decided, *affinity.Guard, error) {
	p.heard.Store(&answered{addr: a.To, at: p.r.cfg.Clock.Now()})
	defer p.end(a)
	return p.alone(a.router, a.req, a.pool)
}

// Silent decides a alone: no answer came by its deadline, or the question
// could not be put. The placer is not asked again for PlacerQuiet, unless
// it answered another question since a was put: then it is alive and a
// met a queue there (a burst of new sessions on a loaded host), not a
// placer gone silent.
func (p *Placement) Silent(a *Asking) (Decided, *affinity.Guard, error) {
	if h := p.heard.Load(); h == nil || h.addr != a.To || !h.at.After(a.start) {
		p.silent.Store(&unanswered{addr: a.To, until: p.r.cfg.Clock.Now().Add(PlacerQuiet)})
	}
	defer p.end(a)
	return p.alone(a.router, a.req, a.pool)
}

// end settles a's question: the next load report tells the placer it is
// counted here, or given up.
func (p *Placement) end(a *Asking) {
	a.ended = true
	p.r.questions.settle(a.Question.Seq)
}

// alone decides a cold request without the placer.
func (p *Placement) alone(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (Decided, *affinity.Guard, error) {
	d, g, err := p.r.Decide(router, req, pool)
	d.Via = ViaAlone
	return d, g, err
}

// IsPlacer reports whether this replica is the tier's placer now: one
// that is not refuses a question before it reads it (Serve).
func (p *Placement) IsPlacer() bool { return p.cfg.IsPlacer() }

// Serve decides a peer's question as the tier's placer (ErrNotPlacer when
// this replica is not) and holds the reservation until the asker's load
// report counts the question: hold is when the driver must Unhold it, for
// a report that never says so.
func (p *Placement) Serve(router *affinity.Router, q Question) (placed affinity.Decision, hold time.Duration, err error) {
	if !p.cfg.IsPlacer() {
		return affinity.Decision{}, 0, ErrNotPlacer
	}
	d, err := p.answer(router, q)
	return d.Decision, p.r.holdBound, err
}

// Unhold ends the hold Serve made for q, if the asker's report has not
// ended it yet.
func (p *Placement) Unhold(q Question) { p.r.holds.unhold(q.From, q.Seq) }
