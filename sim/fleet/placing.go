package fleet

import (
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/virtualclock"
)

// The placer (Config.Placer) on virtual time. Every replica runs the
// router's side of the placement protocol, core.Placement, with replica 0
// the placer; the simulation only carries the questions and the answers,
// GossipDelay each way, loses a share of the answers
// (Config.PlacerAnswerLoss), and brings a question whose answer will not
// come to its deadline. What a replica does then (decide alone, leave the
// placer quiet) is the protocol's, as in the router.

// placerTraffic is the simulation's side of the placer's messages: it puts
// the questions and the answers on the agenda, and hands every decision the
// protocol reaches to dispatch.
type placerTraffic struct {
	cfg    Config // GossipDelay, PlacerTimeout and PlacerAnswerLoss
	clock  *virtualclock.Clock
	agenda *agenda
	// placer is the tier's placer when Config.Placer is set: replica 0.
	placer *replica
	// dispatch submits a decided request to its worker.
	dispatch func(req *request, d core.Decided, guard *affinity.Guard, err error)
	loss     *rand.Rand // draws which answers are lost
	// answersLost counts the answers lost, alone the cold requests
	// decided alone (core.ViaAlone).
	answersLost, alone int
}

// newPlacerTraffic carries the placer's messages of replicas on the
// simulation's agenda and clock; decisions go to dispatch.
func newPlacerTraffic(cfg Config, clk *virtualclock.Clock, ag *agenda, replicas []*replica,
	dispatch func(*request, core.Decided, *affinity.Guard, error)) placerTraffic {
	return placerTraffic{cfg: cfg, clock: clk, agenda: ag, placer: replicas[0], dispatch: dispatch,
		loss: seeded(cfg.Seed, streamPlacerLoss)}
}

// newPlacement is replica n's side of the placement protocol with
// Config.Placer and SyncGossip, nil otherwise.
func newPlacement(cfg Config, n int, c *core.Replica) (*core.Placement, error) {
	if !cfg.Placer || cfg.Sync != SyncGossip {
		return nil, nil
	}
	return c.NewPlacement(core.PlacementConfig{IsPlacer: func() bool { return n == 0 },
		Placer: func() string { return replicaName(0) }, Timeout: cfg.PlacerTimeout})
}

// decide decides a request on its replica, through the placement protocol
// with a placer: a request asked of the placer is decided when its answer
// arrives, or its deadline passes without one.
func (s *simulation) decide(req *request) {
	r := req.replica
	if r.placement == nil {
		decided, guard, err := r.core.Decide(r.router, req.areq, req.pool)
		s.dispatch(req, decided, guard, err)
		return
	}
	s.placing.ask(req)
}

// ask begins the placement of a request on a replica with a placer: it is
// decided at once, or its question goes to the placer.
func (p *placerTraffic) ask(req *request) {
	r := req.replica
	a, decided, guard, err := r.placement.Begin(r.router, req.areq, req.pool)
	if a == nil {
		p.decided(req, decided, guard, err)
		return
	}
	req.asking = a
	p.agenda.push(event{at: p.clock.Elapsed() + p.cfg.GossipDelay, kind: evPlace, req: req})
	if p.answersLate(a) {
		p.agenda.push(event{at: p.deadline(a), kind: evSilent, req: req})
	}
}

// answersLate reports whether no answer to a can be back by its deadline:
// then its asker decides alone at it, as the router's would.
func (p *placerTraffic) answersLate(a *core.Asking) bool {
	return 2*p.cfg.GossipDelay > a.Deadline.Sub(p.clock.Now())
}

// deadline is a's deadline in virtual time since the run's start.
func (p *placerTraffic) deadline(a *core.Asking) time.Duration {
	return p.clock.Elapsed() + a.Deadline.Sub(p.clock.Now())
}

// place answers a peer's question on the placer, which holds the
// reservation until the peer's load report counts the request (or the
// bound, evUnhold), and sends the answer, or its refusal, back; a lost
// answer leaves the asker to its deadline.
func (p *placerTraffic) place(req *request) {
	pl := p.placer
	now := p.clock.Elapsed()
	placed, hold, err := pl.placement.Serve(pl.router, req.asking.Question)
	req.placed, req.refused = placed, err != nil
	if err == nil {
		p.agenda.push(event{at: now + hold, kind: evUnhold, req: req})
	}
	switch {
	case p.answersLate(req.asking): // the asker's deadline is on the agenda already
	case p.answerLost():
		p.answersLost++
		p.agenda.push(event{at: p.deadline(req.asking), kind: evSilent, req: req})
	default:
		p.agenda.push(event{at: now + p.cfg.GossipDelay, kind: evPlaced, req: req})
	}
}

// unhold ends the placer's reservation for a peer's request.
func (p *placerTraffic) unhold(req *request) {
	p.placer.placement.Unhold(req.asking.Question)
}

// answerLost draws whether an answer is lost (Config.PlacerAnswerLoss).
func (p *placerTraffic) answerLost() bool {
	return p.cfg.PlacerAnswerLoss > 0 && p.loss.Float64() < p.cfg.PlacerAnswerLoss
}

// placed routes a request on the worker its placer chose, or alone on its
// refusal.
func (p *placerTraffic) placed(req *request) {
	a, pl := req.asking, req.replica.placement
	if a.Ended() {
		return
	}
	var decided core.Decided
	var guard *affinity.Guard
	var err error
	if req.refused {
		decided, guard, err = pl.Refused(a)
	} else {
		decided, guard, err = pl.Answered(a, req.placed)
	}
	p.decided(req, decided, guard, err)
}

// silent decides alone a request whose question's deadline passed without
// an answer.
func (p *placerTraffic) silent(req *request) {
	if a := req.asking; !a.Ended() {
		decided, guard, err := req.replica.placement.Silent(a)
		p.decided(req, decided, guard, err)
	}
}

// decided counts a cold request decided alone and dispatches a decision
// of the protocol.
func (p *placerTraffic) decided(req *request, d core.Decided, guard *affinity.Guard, err error) {
	if d.Via == core.ViaAlone {
		p.alone++
	}
	p.dispatch(req, d, guard, err)
}
