package core

import (
	"k8s.io/utils/clock"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
)

// Fact says where the knowledge behind a decision came from.
type Fact uint8

// The sources of a decision's knowledge.
const (
	// FactNone: the index held nothing of the prompt for a candidate.
	FactNone Fact = iota
	// FactOwn: the deepest matched block was recorded by this replica's
	// own decision.
	FactOwn
	// FactPeer: it was learned from a peer's gossip.
	FactPeer
	// FactEngine: the chosen worker's match was the blocks its engine's
	// own KV events said it held (--kv-events), not an in-flight
	// reservation.
	FactEngine
	numFacts
)

func (f Fact) String() string {
	switch f {
	case FactOwn:
		return "own"
	case FactPeer:
		return "peer"
	case FactEngine:
		return "engine"
	}
	return "none"
}

// Via says who chose a decision's worker in a tier with a placer.
type Via uint8

// The ways a decision is placed.
const (
	// ViaHere: the replica the request reached decided it on its own view
	// (it knew the prefix, or the tier has no placer).
	ViaHere Via = iota
	// ViaPlacer: this replica is the tier's placer and decided it.
	ViaPlacer
	// ViaAsked: the request was cold here and the placer chose its worker.
	ViaAsked
	// ViaAlone: the request was cold here, the placer gave no answer in
	// time, and the replica decided alone.
	ViaAlone
)

func (v Via) String() string {
	return [...]string{"here", "placer", "asked", "alone"}[v]
}

// Decided is one decision with what the replica knew when it made it: what
// Answered judges against the engine's answer.
type Decided struct {
	affinity.Decision
	// Fact is where the matched block's owner came from.
	Fact Fact
	// Via is who chose the worker.
	Via Via
	// Ineligible says that the deepest owners the index knew of the
	// prompt's prefix, holding more of it than the cache threshold, were
	// none of them candidates (unhealthy, draining, another role or model,
	// or an attempt already tried).
	Ineligible bool
	// Load is the chosen worker's merged in-flight count after the
	// reservation, as this replica saw it.
	Load int64

	hashes []uint64 // the request's, for the answer's second look
	// kvKeys and at are the prompt's engine block keys and the decision's
	// time, when it was made on the engines' events: the answer asks
	// whether the engine evicted them since.
	kvKeys []kvevents.Key
	at     time.Time
	// routed says the decision came through Decide (a zero Decided is
	// judged by nothing).
	routed bool
}

// Routed reports whether d was decided on the prefix (through Decide or
// on the placer's answer): its Fact and Via say something. A policy that
// ignores prefixes leaves it false.
func (d Decided) Routed() bool { return d.routed }

// Decide routes req on router over pool (router.Route) and notes what the
// replica knew; a router whose policy ignores prefixes predicts nothing,
// and its decisions are not judged. What it knew is read just before routing: the decision
// records its own fact at once. The guard is the caller's to release, as
// with Route.
func (r *Replica) Decide(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (Decided, *affinity.Guard, error) {
	return r.decide.decide(router, req, pool)
}

// decider makes the replica's decisions on its routers and notes what the
// replica knew when it made them: on the index (own, a peer's) or on the
// engines' events.
type decider struct {
	reg        *registry
	loads      *affinity.LoadTable
	index      *affinity.Index
	thresholds *atomic.Pointer[affinity.Thresholds] // the replica's, SetThresholds
	blockSize  int
	events     *events
	clock      clock.PassiveClock
}

func (c *decider) decide(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (Decided, *affinity.Guard, error) {
	if !router.RoutesByPrefix() {
		d, g, err := router.Route(req, pool)
		return Decided{Decision: d}, g, err
	}
	c.events.use(req)
	fact, ineligible := c.knowledge(req, pool)
	d, g, err := router.Route(req, pool)
	if err != nil {
		return Decided{}, nil, err
	}
	out := Decided{Decision: d, Fact: fact, Ineligible: ineligible, hashes: req.Hashes, routed: true}
	c.events.note(&out, req)
	if l := c.loads.Lookup(d.Worker); l != nil {
		out.Load = l.Merged()
	}
	return out, g, nil
}

// knowledge looks up the deepest block of req any known worker is
// recorded for: whether its owners among the candidates were recorded by
// this replica or learned from a peer, and whether none of them is a
// candidate while that block holds more of the text than the threshold.
func (c *decider) knowledge(req *affinity.Request, pool *affinity.Pool) (Fact, bool) {
	var buf [8]affinity.WorkerID
	m := c.deepest(req, pool, buf[:0])
	if m.depth < 0 {
		return FactNone, false
	}
	fact := FactNone
	for _, w := range m.owners {
		if !pool.Contains(w) {
			continue
		}
		if inserted, held := c.index.Inserted(req.Hashes[m.depth], w); inserted {
			fact = FactOwn
		} else if held && fact == FactNone {
			fact = FactPeer
		}
	}
	return fact, !m.candidate && m.deep
}

// deepestMatch is what the index knows of a request's prefix: the deepest
// block any known worker is recorded for (-1: none) and its owners,
// whether one of them is a candidate, and whether that block holds more of
// the text than the cache threshold.
type deepestMatch struct {
	depth           int
	owners          []affinity.WorkerID
	candidate, deep bool
}

// deepFor reports whether a match of req to depth (in blocks of its
// routing text, -1 for none) holds more of the text than the cache
// threshold.
func (c *decider) deepFor(req *affinity.Request, depth int) bool {
	return depth >= 0 && c.thresholds.Load().Hit(min((depth+1)*c.blockSize, req.Len()), req.Len())
}

// deepest asks the index for req's deepest known block over every known
// worker, its owners appended to dst.
func (c *decider) deepest(req *affinity.Request, pool *affinity.Pool, dst []affinity.WorkerID) deepestMatch {
	k := c.reg.load()
	if len(req.Hashes) == 0 || k.pool == nil {
		return deepestMatch{depth: -1}
	}
	depth, owners := c.index.Match(req.Hashes, k.pool, dst)
	if depth < 0 {
		return deepestMatch{depth: -1}
	}
	m := deepestMatch{depth: depth, owners: owners, deep: c.deepFor(req, depth)}
	for _, w := range owners {
		if pool.Contains(w) {
			m.candidate = true
			break
		}
	}
	return m
}
