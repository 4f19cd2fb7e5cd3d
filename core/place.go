package core

import (
	"github.com/kvrouter/kvrouter/affinity"
)

// The tier's placer. A replica that knows nothing of a request's prefix
// (a cold request: a new session, a new group of rollouts, a turn whose
// previous turn's fact has not reached it yet) asks one replica of the tier,
// the placer, to choose its worker. Every cold decision of the tier is then
// made on one view, as one router makes them, where replicas deciding alone
// in the same instant would each send theirs to the worker that looks idle
// before any has heard of the others. Requests whose prefix the replica knows
// are decided where they arrive.

// Cold reports whether req is one for the placer: no candidate is known to
// hold more of its prefix than the cache threshold.
func (r *Replica) Cold(req *affinity.Request, pool *affinity.Pool) bool {
	k := r.known.Load()
	if len(req.Hashes) == 0 || k.pool == nil {
		return true
	}
	var buf [8]affinity.WorkerID
	depth, owners := r.index.Match(req.Hashes, k.pool, buf[:0])
	if depth < 0 || !r.thresholds.Load().Hit(min((depth+1)*r.cfg.BlockSize, len(req.Text)), len(req.Text)) {
		return true
	}
	for _, w := range owners {
		if pool.Contains(w) {
			return false
		}
	}
	return true
}

// Place decides req as the tier's placer, for a peer or for this replica
// itself: as Decide, on the loads as they are (affinity.Request.Placer).
// The guard is the caller's: for a peer's request it stands for the
// request until the peer's own load report counts it.
func (r *Replica) Place(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (Decided, *affinity.Guard, error) {
	req.Placer = true
	return r.Decide(router, req, pool)
}

// DecideOn is Decide with the worker the placer chose (placed): the
// decision is recorded here as this replica's own and judged against the
// engine's answer like any other, as learned from a peer when the placer
// predicted a hit.
func (r *Replica) DecideOn(router *affinity.Router, req *affinity.Request, pool *affinity.Pool, placed affinity.Decision) (Decided, *affinity.Guard, error) {
	d, g, err := router.RouteTo(req, pool, placed)
	if err != nil {
		return Decided{}, nil, err
	}
	out := Decided{Decision: d, hashes: req.Hashes, routed: router.RoutesByPrefix()}
	if d.Hit {
		out.Fact = FactPeer
	}
	if l := r.loads.Lookup(d.Worker); l != nil {
		out.Load = l.Merged()
	}
	return out, g, nil
}
