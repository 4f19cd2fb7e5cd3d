package affinity

import "errors"

// ErrNoCandidates is returned when the pool is empty: no worker is eligible.
var ErrNoCandidates = errors.New("no eligible worker")

// reserveAttempts bounds how often selection is redone when a concurrent
// request reserved the same worker between our read and our reservation.
const reserveAttempts = 32

// Decision is the outcome of routing one request.
type Decision struct {
	Worker  WorkerID
	Hit     bool
	Shed    bool
	Matched int // bytes
	Total   int // bytes of routing text
}

// OwnershipSink hears about every ownership decision of this replica (the
// gossip of prefix digests).
type OwnershipSink interface {
	Owned(hashes []uint64, worker WorkerID)
}

// ExtendingSink is an OwnershipSink that also hears how much of the prefix
// the worker was known to hold before (a hit's match), so that what it tells
// the peers charges only the new blocks. The Router prefers it when the sink
// implements it.
type ExtendingSink interface {
	OwnershipSink
	// OwnedBeyond is Owned when worker already held hashes[:known+1];
	// known is -1 for a miss.
	OwnedBeyond(hashes []uint64, known int, worker WorkerID)
}

// Router is one policy bound to the replica's load table and index. The
// proxy keeps one Router per role.
type Router struct {
	policy    Policy
	loads     *LoadTable
	index     *Index
	blockSize int
	sink      OwnershipSink
	// adapters, when set, narrows an adapter request's candidates to where
	// the adapter is resident (adapter_place.go), by thresholds.
	adapters   *Adapters
	thresholds Thresholds
}

// NewRouter binds policy to the replica's counters and index. sink may be nil.
func NewRouter(policy Policy, loads *LoadTable, index *Index, blockSize int, sink OwnershipSink) *Router {
	return &Router{policy: policy, loads: loads, index: index, blockSize: blockSize, sink: sink}
}

// PlaceAdapters makes the router send a request for a LoRA adapter where
// the table says the adapter is resident, judged by th (the overload check
// and the hot-prefix bound), before its policy chooses. Call it before the
// router is used.
func (r *Router) PlaceAdapters(t *Adapters, th Thresholds) {
	r.adapters, r.thresholds = t, th
}

// PlacesAdapters reports whether the router places adapter requests by
// residency.
func (r *Router) PlacesAdapters() bool { return r.adapters != nil }

// Policy returns the router's policy.
func (r *Router) Policy() Policy { return r.policy }

// Prepare hashes a request's routing text for model.
func (r *Router) Prepare(model string, text []byte, sessionKey uint64) *Request {
	return r.PrepareText(model, Text{text}, sessionKey)
}

// PrepareText is Prepare of a text in pieces.
func (r *Router) PrepareText(model string, text Text, sessionKey uint64) *Request {
	return r.PrepareFor(CacheID{Model: model}, text, sessionKey)
}

// PrepareFor hashes a request's routing text under its cache identity (the
// model or adapter it names and its cache_salt): its chains match only
// blocks of the same identity.
func (r *Router) PrepareFor(id CacheID, text Text, sessionKey uint64) *Request {
	limit := MaxChainBlocks // a router without an index (a policy that needs none) hashes what the gossip could carry
	if r.index != nil {
		limit = r.index.MaxBudget()
	}
	n, seed := text.Len(), id.Seed()
	hashes, full := RequestHashes(make([]uint64, 0, min(n/r.blockSize, limit)+1), seed, text, r.blockSize, limit)
	return &Request{TextLen: n, Hashes: hashes, Full: full, Tail: TailKey(seed, text, hashes[:full], r.blockSize),
		SessionKey: sessionKey}
}

// Route selects a worker from pool, reserves it (its local in-flight count is
// incremented before anything else can read it, so concurrent cold requests
// see each other), then records it as the owner of the request's blocks. The
// caller must Release the guard exactly when the attempt ends.
func (r *Router) Route(req *Request, pool *Pool) (Decision, *Guard, error) {
	if pool.Len() == 0 {
		return Decision{}, nil, ErrNoCandidates
	}
	c, g := r.selectAndReserve(req, pool)
	if o, ok := r.policy.(routedObserver); ok {
		o.routed(c)
	}
	return r.record(req, c, g), g, nil
}

// ErrNotACandidate is returned by RouteTo for a worker outside the pool.
var ErrNotACandidate = errors.New("placed worker is not a candidate")

// RouteTo is Route with the choice made elsewhere: by the tier's placer,
// which decided placed on its own view. The worker is reserved and recorded
// as the owner of the request's blocks as Route would; placed's Hit and
// Matched are the placer's prediction. The reservation is not counted in
// the peer share: the placer saw it, so no peer has to guess it.
func (r *Router) RouteTo(req *Request, pool *Pool, placed Decision) (Decision, *Guard, error) {
	i := pool.position(placed.Worker)
	if i < 0 {
		return Decision{}, nil, ErrNotACandidate
	}
	m := pool.At(i)
	req.reserved = m
	g := r.loads.Acquire(m)
	return r.record(req, Choice{Load: m, Hit: placed.Hit, Matched: placed.Matched}, g), g, nil
}

// record counts a reserved choice as processed and in its worker's prefill
// backlog (g, its reservation) and, for a prefix policy, records its worker
// as the owner of the request's blocks and tells the peers.
func (r *Router) record(req *Request, c Choice, g *Guard) Decision {
	c.Load.processed.Add(1)
	g.chargeBacklog(int64(uncached(req, c)))
	w := c.Load.id
	if r.adapters != nil && req.Adapter != 0 {
		r.adapters.route(w, req.Adapter, g)
	}
	if RoutesByPrefix(r.policy) && len(req.Hashes) > 0 {
		r.index.Insert(req.Hashes, w)
		r.announce(req, c, w)
	}
	return Decision{Worker: w, Hit: c.Hit, Shed: c.Shed, Matched: c.Matched, Total: req.Len()}
}

// uncached is how much of req's text the chosen worker is expected to
// compute: the unmatched rest of a hit, all of a miss.
func uncached(req *Request, c Choice) int {
	if c.Hit {
		return max(req.Len()-c.Matched, 0)
	}
	return req.Len()
}

// announce tells the sink that w owns hashes, and, for a hit, how deep it
// was known to own them already.
// The full blocks go as a chain; a partial tail as a chain of its own.
func (r *Router) announce(req *Request, c Choice, w WorkerID) {
	if r.sink == nil {
		return
	}
	chain := req.Hashes[:req.Full]
	if ext, ok := r.sink.(ExtendingSink); ok && len(chain) > 0 {
		known := -1
		if c.Hit {
			known = c.Matched/r.blockSize - 1
		}
		ext.OwnedBeyond(chain, known, w)
	} else if len(chain) > 0 {
		r.sink.Owned(chain, w)
	}
	if tail := req.Hashes[req.Full:]; len(tail) > 0 {
		r.sink.Owned(tail, w)
	}
}

// selectAndReserve runs the policy, over the workers where the request's
// adapter may go when it names one, and reserves its choice, again while a
// concurrent request changed the choice's count in between.
func (r *Router) selectAndReserve(req *Request, pool *Pool) (Choice, *Guard) {
	if !req.Placer {
		req.burst = r.loads.burstNow()
	}
	if r.adapters != nil {
		pool = r.adapters.narrow(req, pool, r.thresholds)
	}
	defer r.noteReservation(req)
	for range reserveAttempts - 1 {
		c := r.policy.Select(req, pool)
		if g, ok := r.loads.reserve(c.Load, c.Seen); ok {
			req.reserved = c.Load
			return c, g
		}
	}
	c := r.policy.Select(req, pool)
	req.reserved = c.Load
	return c, r.loads.Acquire(c.Load)
}

// noteReservation counts the reservation for the peer share, when it is on.
func (r *Router) noteReservation(req *Request) {
	if req.burst.peers > 0 {
		req.reserved.recent.note(req.burst.window)
	}
}

// RoutesByPrefix reports whether the router's policy places requests by the
// prefixes it records: only its decisions predict a cache hit or miss.
func (r *Router) RoutesByPrefix() bool { return RoutesByPrefix(r.policy) }

// UsesSessionKey reports whether the router's policy places requests by
// their session key, the argument of Prepare that only it reads.
func (r *Router) UsesSessionKey() bool { return UsesSessionKey(r.policy) }
