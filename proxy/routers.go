package proxy

import (
	"errors"

	"github.com/kvrouter/kvrouter/affinity"
)

// routerSet is what requests are routed with: the router of regular
// workers and, with disaggregation, the prefill and decode ones. SetRouters
// replaces it whole; a request reads it once per decision.
type routerSet struct {
	regular *affinity.Router
	pd      *PD // nil without disaggregation
}

// SetRouters replaces the routers of the request path in one step (a
// routing change the cluster replicated): requests routed from now on use
// the new ones, attempts already under way finish with theirs. The mode
// (disaggregated or not) cannot change: pd must be set exactly when the
// proxy was built with Deps.PD, in the same Mode. Safe for concurrent use.
func (p *Proxy) SetRouters(regular *affinity.Router, pd *PD) error {
	switch {
	case regular == nil:
		return errors.New("proxy: SetRouters needs a router")
	case (pd != nil) != (p.pd != nil):
		return errors.New("proxy: SetRouters cannot turn disaggregation on or off")
	case pd != nil && (pd.Prefill == nil || pd.Decode == nil || pd.Mode != p.pd.cfg.Mode):
		return errors.New("proxy: SetRouters needs a prefill and a decode router, in the same mode")
	}
	p.routers.Store(&routerSet{regular: regular, pd: pd})
	return nil
}

// DecidingRouter is the router whose decisions the Decider makes: the
// prefill one under disaggregation, else the regular one.
func (p *Proxy) DecidingRouter() *affinity.Router {
	rs := p.routers.Load()
	if rs.pd != nil {
		return rs.pd.Prefill
	}
	return rs.regular
}
