package fleet

import (
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// The placer (Config.Placer) on virtual time. Every replica runs the
// router's side of the placement protocol, core.Placement, with replica 0
// the placer; the simulation only carries the questions and the answers,
// GossipDelay each way, loses a share of the answers
// (Config.PlacerAnswerLoss), and brings a question whose answer will not
// come to its deadline. What a replica does then (decide alone, leave the
// placer quiet) is the protocol's, as in the router.

// placerTraffic is the simulation's side of the placer's messages.
type placerTraffic struct {
	loss *rand.Rand // draws which answers are lost
	// answersLost counts the answers lost, alone the cold requests
	// decided alone (core.ViaAlone).
	answersLost, alone int
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

// placer is the tier's placer when Config.Placer is set.
func (s *simulation) placer() *replica { return s.replicas[0] }

// decide decides a request on its replica, through the placement protocol
// with a placer: a request asked of the placer is decided when its answer
// arrives, or its deadline passes without one.
func (s *simulation) decide(req *request) {
	r := req.replica
	if r.placement == nil {
		decided, guard, err := r.core.Decide(r.router, req.areq, r.pool)
		s.dispatch(req, decided, guard, err)
		return
	}
	a, decided, guard, err := r.placement.Begin(r.router, req.areq, r.pool)
	if a == nil {
		s.decided(req, decided, guard, err)
		return
	}
	req.asking = a
	s.agenda.push(event{at: s.clock.Elapsed() + s.cfg.GossipDelay, kind: evPlace, req: req})
	if s.answersLate() {
		s.agenda.push(event{at: s.deadline(a), kind: evSilent, req: req})
	}
}

// answersLate reports whether no answer can be back by its question's
// deadline: then every asker decides alone at it, as the router's would.
func (s *simulation) answersLate() bool { return 2*s.cfg.GossipDelay > s.cfg.PlacerTimeout }

// deadline is a's deadline in virtual time since the run's start.
func (s *simulation) deadline(a *core.Asking) time.Duration {
	return s.clock.Elapsed() + a.Deadline.Sub(s.clock.Now())
}

// place answers a peer's question on the placer, which holds the
// reservation until the peer's load report counts the request (or the
// bound, evUnhold), and sends the answer, or its refusal, back; a lost
// answer leaves the asker to its deadline.
func (s *simulation) place(req *request) {
	p := s.placer()
	now := s.clock.Elapsed()
	placed, hold, err := p.placement.Serve(p.router, req.asking.Question)
	req.placed, req.refused = placed, err != nil
	if err == nil {
		s.agenda.push(event{at: now + hold, kind: evUnhold, req: req})
	}
	switch {
	case s.answersLate(): // the asker's deadline is on the agenda already
	case s.answerLost():
		s.placing.answersLost++
		s.agenda.push(event{at: s.deadline(req.asking), kind: evSilent, req: req})
	default:
		s.agenda.push(event{at: now + s.cfg.GossipDelay, kind: evPlaced, req: req})
	}
}

// answerLost draws whether an answer is lost (Config.PlacerAnswerLoss).
func (s *simulation) answerLost() bool {
	return s.cfg.PlacerAnswerLoss > 0 && s.placing.loss.Float64() < s.cfg.PlacerAnswerLoss
}

// placed routes a request on the worker its placer chose, or alone on its
// refusal.
func (s *simulation) placed(req *request) {
	a, p := req.asking, req.replica.placement
	if a.Ended() {
		return
	}
	var decided core.Decided
	var guard *affinity.Guard
	var err error
	if req.refused {
		decided, guard, err = p.Refused(a)
	} else {
		decided, guard, err = p.Answered(a, req.placed)
	}
	s.decided(req, decided, guard, err)
}

// silent decides alone a request whose question's deadline passed without
// an answer.
func (s *simulation) silent(req *request) {
	if a := req.asking; !a.Ended() {
		decided, guard, err := req.replica.placement.Silent(a)
		s.decided(req, decided, guard, err)
	}
}

// decided counts a cold request decided alone and dispatches a decision
// of the protocol.
func (s *simulation) decided(req *request, d core.Decided, guard *affinity.Guard, err error) {
	if d.Via == core.ViaAlone {
		s.placing.alone++
	}
	s.dispatch(req, d, guard, err)
}
