package proxy

import (
	"errors"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// routerSet is what requests are routed with: the router of regular
// workers and, with disaggregation, the prefill and decode ones. SetRouters
// replaces it whole; a request reads it once per decision.
type routerSet struct {
	regular *affinity.Router
	pd      *PD // nil without disaggregation
}

// setRouters replaces the routers in one step (see Proxy.SetRouters).
func (r *routing) setRouters(regular *affinity.Router, pd *PD) error {
	was := r.routers.Load()
	switch {
	case regular == nil:
		return errors.New("proxy: SetRouters needs a router")
	case (pd != nil) != (was.pd != nil):
		return errors.New("proxy: SetRouters cannot turn disaggregation on or off")
	case pd != nil && (pd.Prefill == nil || pd.Decode == nil || pd.Mode != was.pd.Mode):
		return errors.New("proxy: SetRouters needs a prefill and a decode router, in the same mode")
	}
	r.routers.Store(&routerSet{regular: regular, pd: pd})
	return nil
}

// decidingRouter is the router whose decisions the Decider makes: the
// prefill one under disaggregation, else the regular one.
func (r *routing) decidingRouter() *affinity.Router {
	rs := r.routers.Load()
	if rs.pd != nil {
		return rs.pd.Prefill
	}
	return rs.regular
}

// routing is how the legs of the proxy's requests are made: the live
// routers, the pools of the workers that serve a model in a role, the
// request each router decides on, and the legs over them with the retry
// policy's attempts. It owns no goroutine; safe for concurrent use.
type routing struct {
	routers  atomic.Pointer[routerSet] // the live routers: SetRouters
	fleet    *Fleet
	loads    *affinity.LoadTable
	decider  Decider       // nil: the routers decide alone
	attempts int           // Retry.MaxAttempts
	adapters *adapterLoads // nil unless LoRAConfig.LoadPath
	pd       bool          // disaggregated: the client's answer is a decode worker's
}

// finalRouter is the router of the workers whose answer the client gets.
func (r *routing) finalRouter() *affinity.Router {
	rs := r.routers.Load()
	if rs.pd != nil {
		return rs.pd.Decode
	}
	return rs.regular
}

// finalRole is the role of the worker whose answer the client gets.
func (r *routing) finalRole() string {
	if r.pd {
		return RoleDecode
	}
	return RoleRegular
}

// usesSessionKey reports whether any policy of the request path places
// requests by a session key.
func (r *routing) usesSessionKey() bool {
	rs := r.routers.Load()
	if rs.pd != nil {
		return rs.pd.Prefill.UsesSessionKey() || rs.pd.Decode.UsesSessionKey()
	}
	return rs.regular.UsesSessionKey()
}

// sessionKey is x's consistent-hash key, or 0 when no policy places by one:
// hashing a large body is wasted on every policy but those.
func (r *routing) sessionKey(x *exchange) uint64 {
	if !r.usesSessionKey() {
		return 0
	}
	return wire.SessionKey(x.ctx.Request.Header.Peek("X-Session-ID"), x.in, x.body)
}

// prepare hashes x's routing text for router under its cache identity (the
// model or adapter and the cache_salt) and says which adapter it runs, if
// any: the residency table places it, and the engines' KV events key its
// blocks by the adapter's name and the salt.
func (r *routing) prepare(router *affinity.Router, x *exchange, key uint64) *affinity.Request {
	in := &x.in
	req := router.PrepareFor(affinity.CacheID{Model: in.Model, Salt: in.Salt}, in.Text, key)
	adapter := ""
	if r.fleet.view().isAdapter(in.Model) {
		adapter = in.Model
		req.Adapter = affinity.AdapterKeyOf(adapter)
	}
	req.CacheIdentity = kvevents.Identity(adapter, in.Salt)
	return req
}

// poolFor is the pool of role's workers serving model. A model no worker
// serves is a 404 naming it, unless adapters are loaded on demand
// (LoRAConfig.LoadPath): then it is loaded, as an adapter, on the worker
// router would place it on, first.
func (r *routing) poolFor(x *exchange, router *affinity.Router, role, model string) (*affinity.Pool, error) {
	pool, err := r.fleet.view().pool(role, model)
	if err == nil || r.adapters == nil || !errors.Is(err, failure.ErrModelNotFound) {
		return pool, err
	}
	if err := r.adapters.load(&x.life, router, role, model); err != nil {
		return nil, err
	}
	return r.fleet.view().pool(role, model)
}

// newLeg is the leg of x in phase ("" for a regular request) over pool,
// routed by router with req, with the retry policy's attempts and x's body
// (a P/D leg's own body replaces it). A prefill's answer is the router's to
// read; any other leg's is the client's, streamed when it streams. The
// decider decides every leg but a decode one, whose engine gets its cache
// from the prefill.
func (r *routing) newLeg(x *exchange, phase string, router *affinity.Router, req *affinity.Request, pool *affinity.Pool) *leg {
	final := phase != RolePrefill
	l := &leg{phase: phase, router: router, req: req, pool: pool, body: x.body, attempts: r.attempts,
		stream: final, toClient: final}
	if phase != RoleDecode {
		l.decider = r.decider
	}
	return l
}

// pinnedLeg is the leg that sends x, whole, to worker w only: one attempt,
// no choice. x has begun.
func (r *routing) pinnedLeg(x *exchange, w affinity.WorkerID) *leg {
	load := r.loads.Get(w)
	l := r.newLeg(x, "", r.finalRouter(), nil, affinity.NewPool([]*affinity.Load{load}))
	l.pin(&routed{dec: affinity.Decision{Worker: w}, guard: r.loads.Acquire(load)})
	return l
}

// leastLoaded is the least loaded eligible worker of the final role that
// serves model (any model: "").
func (r *routing) leastLoaded(model string) (affinity.WorkerID, error) {
	pool, err := r.fleet.view().pool(r.finalRole(), model)
	if err != nil {
		return 0, err
	}
	least := pool.At(0)
	for i := range pool.Len() {
		if l := pool.At(i); l.Merged() < least.Merged() {
			least = l
		}
	}
	return least.ID(), nil
}
