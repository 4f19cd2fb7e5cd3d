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

// Router is one policy bound to the replica's load table and index. The
// proxy keeps one Router per role.
type Router struct {
	policy    Policy
	loads     *LoadTable
	index     *Index
	blockSize int
	sink      OwnershipSink
}

// NewRouter binds policy to the replica's counters and index. sink may be nil.
func NewRouter(policy Policy, loads *LoadTable, index *Index, blockSize int, sink OwnershipSink) *Router {
	return &Router{policy: policy, loads: loads, index: index, blockSize: blockSize, sink: sink}
}

// Policy returns the router's policy.
func (r *Router) Policy() Policy { return r.policy }

// Prepare hashes a request's routing text for model.
func (r *Router) Prepare(model string, text []byte, sessionKey uint64) *Request {
	hashes := BlockHashes(make([]uint64, 0, len(text)/r.blockSize), model, text, r.blockSize)
	return &Request{Text: text, Hashes: hashes, Tail: TailKey(model, text, hashes, r.blockSize), SessionKey: sessionKey}
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
	c.Load.processed.Add(1)
	w := c.Load.id
	if _, ok := r.policy.(prefixAware); ok && len(req.Hashes) > 0 {
		r.index.Insert(req.Hashes, w)
		if r.sink != nil {
			r.sink.Owned(req.Hashes, w)
		}
	}
	return Decision{Worker: w, Hit: c.Hit, Shed: c.Shed, Matched: c.Matched, Total: len(req.Text)}, g, nil
}

func (r *Router) selectAndReserve(req *Request, pool *Pool) (Choice, *Guard) {
	for range reserveAttempts - 1 {
		c := r.policy.Select(req, pool)
		if g, ok := r.loads.reserve(c.Load, c.Seen); ok {
			return c, g
		}
	}
	c := r.policy.Select(req, pool)
	return c, r.loads.Acquire(c.Load)
}
