package core

import (
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
)

// The tier's placer. A replica that knows nothing of a request's prefix
// (a cold request: a new session, a new group of rollouts, a turn whose
// previous turn's fact has not reached it yet), or knows only a prefix that
// the request shares with others (a new session on a shared system prompt),
// asks one replica of the tier, the placer, to choose its worker. Every
// decision that places a new conversation is then made on one view, as one
// router makes them, where replicas deciding alone in the same instant
// would each send theirs to the worker that looks least loaded before any
// has heard of the others. Requests that continue a conversation the
// replica knows are decided where they arrive.

// cold reports whether req is one for the placer: no candidate is known to
// hold more of its prefix than the cache threshold, or the prefix known is
// one that req leaves, as others did before it (leavesSharedPrefix).
//
// A request with the engines' tokens is asked of the placer on the same
// rule, and the placer decides it on the engines' events (the question
// carries its block keys), with one exception: a turn of which the
// engines' events hold more than the index knows, and enough for a hit
// where the index knows nothing of it (its earlier turns stored by an
// engine: a peer's fact on its way, or traffic that did not pass the
// router), is decided here, on the events. Decided where they arrived
// instead, as they were while the placer decided on its index (a prompt
// nobody was known to hold, a shared prefix one engine alone held), a
// burst of new sessions was placed unevenly by 8 replicas (first turns 9
// to 30 a worker against 16 each through one replica; the busiest engine
// 1.11-1.26x the mean engine's prompt tokens; llm-d-inference-sim, 128
// sessions, 8 engines). The extra look at the engines (engineHeld, a pass
// over the candidates before the decision's own) is paid by requests the
// index does not settle alone.
func (c *decider) cold(req *affinity.Request, pool *affinity.Pool) bool {
	var buf [8]affinity.WorkerID
	m := c.deepest(req, pool, buf[:0])
	known := m.candidate && m.deep
	switch {
	case known && !c.leavesSharedPrefix(req, m.depth):
		return false
	case !c.events.routesOn(req):
		return !known || c.leavesSharedPrefix(req, m.depth)
	case m.depth < 0: // nothing of it known here: the placer's, unless an engine holds enough for a hit
		return !c.deepFor(req, c.events.engineHeld(req, pool))
	}
	// The index knows a prefix of it, one others share or too little for a
	// hit (a long conversation's system prompt): whether an engine holds
	// more than the shared prefix is the events' to say.
	return c.events.engineHeld(req, pool) < c.sharedEnd(req, m.depth)
}

// sharedEnd is the block index past the prefix of req the index knows to
// depth, as far as others may share it: the next block, unless the index
// knows it only from a peer's checkpoint, which stands for a prefix that
// may go on unannounced up to the peer's next checkpoint (a system prompt
// of 10 blocks is announced at block 7; an engine holding its 10 holds no
// more than a new session's first turn shares).
func (c *decider) sharedEnd(req *affinity.Request, depth int) int {
	if affinity.IsCheckpoint(depth) && !c.index.Recorded(req.Hashes[depth]) {
		return 2*depth + 1
	}
	return depth + 1
}

// leavesSharedPrefix reports whether req goes on past its deepest known
// block, and a request recorded here went on past that block before it
// (the index's fork): req starts a conversation of its own on a prefix
// others share, as every session's first turn on one system prompt does.
// Such a turn is a hit on the prompt's owners, which hot-prefix spreading
// widens as the sessions pile on; replicas that widen and choose on their
// own partial views placed a burst of new sessions unevenly (11 to 24
// sessions a worker where one replica placed 16 on each: 128 sessions, 8
// workers, real processes), and a session stays where it was placed, its
// worker's queue and evictions with it.
func (c *decider) leavesSharedPrefix(req *affinity.Request, depth int) bool {
	return depth+1 < len(req.Hashes) && c.index.Forks(req.Hashes[depth], depth)
}

// placing is how a replica of a tier with a placer decides a request
// (Placement.Begin).
type placing int

const (
	// decideHere: the replica knows the request's prefix, or the request
	// is not one to place (Decide).
	decideHere placing = iota
	// placeHere: this replica is the placer (place). It places every
	// request of its own, cold or not: its view already counts the tier's
	// cold requests as it places them, so the peers' expected share of a
	// burst, which the other replicas add to what they see, would count
	// them twice (at 8 replicas a burst of rollout groups then piled on
	// some workers: 0.70-0.85 of one replica's throughput in fleetsim).
	placeHere
	// askPlacer: the request is cold here, or starts a conversation on a
	// shared prefix (cold): the placer chooses its worker (ask, then
	// decideOn), or, without an answer, Decide.
	askPlacer
)

// placingOf says how req is decided on this replica, which is the tier's
// placer when isPlacer. Requests of a LoRA adapter placed by residency
// (which agrees across the tier by each adapter's rendezvous order, and
// whose question would not carry its adapter), and policies that do not
// route by prefix, are decided where they arrive.
func (c *decider) placingOf(router *affinity.Router, req *affinity.Request, pool *affinity.Pool, isPlacer bool) placing {
	switch {
	case !router.RoutesByPrefix() || (req.Adapter != 0 && router.PlacesAdapters()):
		return decideHere
	case isPlacer:
		return placeHere
	case c.cold(req, pool):
		return askPlacer
	}
	return decideHere
}

// place decides req as the tier's placer, for a peer or for this replica
// itself: as Decide, on the loads as they are (affinity.Request.Placer).
// The guard is the caller's: for a peer's request it stands for the
// request until the peer's own load report counts it.
func (c *decider) place(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (Decided, *affinity.Guard, error) {
	req.Placer = true
	defer func() { req.Placer = false }() // a retry of the request decides as any other
	return c.decide(router, req, pool)
}

// decideOn is Decide with the worker the placer chose (placed): the
// decision is recorded here as this replica's own and judged against the
// engine's answer like any other, as learned from a peer when the placer
// predicted a hit.
func (c *decider) decideOn(router *affinity.Router, req *affinity.Request, pool *affinity.Pool, placed affinity.Decision) (Decided, *affinity.Guard, error) {
	d, g, err := router.RouteTo(req, pool, placed)
	if err != nil {
		return Decided{}, nil, err
	}
	out := Decided{Decision: d, hashes: req.Hashes, routed: router.RoutesByPrefix()}
	if d.Hit {
		out.Fact = FactPeer
	}
	c.events.use(req) // a no-op where the question found the request cold
	c.events.note(&out, req)
	if l := c.loads.Lookup(d.Worker); l != nil {
		out.Load = l.Merged()
	}
	return out, g, nil
}

// Question is a peer's cold request as the placer needs it: the hashes of
// its routing text (not the text), and the candidates the peer would choose
// from, in its pool's order. From and Seq name it for the placer's hold: the
// asker's gossip origin and its number for the question (holds.go).
//
// A request with the engines' tokens carries their block keys too (KV,
// with how many tokens they were made of and how much of the text those
// cover), and the placer decides it on the engines' events, as the peer
// would.
type Question struct {
	From       string
	Seq        uint64
	Hashes     []uint64
	Full       int
	Tail       uint64
	TextLen    int
	Candidates []affinity.WorkerID
	KV         []kvevents.Key
	Tokens     int
	TokenText  int
}

// ask is the question for req over pool, numbered: the caller must settle
// it, answered or not.
func (p *Placement) ask(req *affinity.Request, pool *affinity.Pool) Question {
	q := Question{From: p.r.origin, Seq: p.r.questions.ask(), Hashes: req.Hashes, Full: req.Full, Tail: req.Tail,
		TextLen: req.Len(), Candidates: make([]affinity.WorkerID, pool.Len())}
	for i := range pool.Len() {
		q.Candidates[i] = pool.At(i).ID()
	}
	if m, ok := req.Matcher.(*kvMatch); ok {
		q.KV, q.Tokens, q.TokenText = m.keys, m.tokens, m.tokenText
	}
	return q
}

// answer decides a peer's question as the placer (place) over the
// candidates this replica knows of, in the peer's order, and holds the
// reservation until the asker's load report counts the question, or until
// unhold, holdBound after the answer.
func (p *Placement) answer(router *affinity.Router, q Question) (Decided, error) {
	k := p.r.reg.load()
	members := make([]*affinity.Load, 0, len(q.Candidates))
	for _, id := range q.Candidates {
		if l, ok := k.byID[id]; ok {
			members = append(members, l)
		}
	}
	req := &affinity.Request{Hashes: q.Hashes, Full: q.Full, Tail: q.Tail, TextLen: q.TextLen}
	p.r.decide.events.given(req, q.KV, q.Tokens, q.TokenText)
	d, g, err := p.r.decide.place(router, req, affinity.NewPool(members))
	if err != nil {
		return Decided{}, err
	}
	p.r.holds.add(q.From, q.Seq, g)
	return d, nil
}
