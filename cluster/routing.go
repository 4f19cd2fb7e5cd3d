package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// The routing config (policy, miss placement, thresholds, per role under
// disaggregation) lives in the registry: the first replica to seed a
// registry records its flags there, and from then on every replica routes
// with the registry's copy, which GET/PUT /cluster/routing read and change
// for the whole tier (compare-and-set on the index it was last set at). The
// block size is a replica's own (it hashes with it) and cannot change at
// run time: a replica whose --block-size differs from the registry's is
// refused.

// ErrBlockSizeFixed: a routing change or a replica whose block size
// differs from the registry's. Hashes of another block size mean nothing to
// the other replicas.
var ErrBlockSizeFixed = errors.New("the block size cannot change at run time")

// routingFromFlags is the routing config this replica's flags describe,
// what it seeds a fresh registry with.
func (r *Replica) routingFromFlags() store.RoutingConfig {
	rt := r.cfg.Routing
	c := store.RoutingConfig{BlockSize: rt.BlockSize, Policy: rt.Policy, MissPlacement: rt.MissPlacement,
		CacheThreshold: rt.Thresholds.CacheThreshold, BalanceAbsThreshold: rt.Thresholds.BalanceAbs,
		BalanceRelThreshold: rt.Thresholds.BalanceRel,
		HotPrefixLoad:       rt.Thresholds.HotLoad, HotPrefixOwners: rt.Thresholds.HotOwners}
	if rt.PD != "" {
		c.Prefill = roleRouting(rt.PrefillPolicy, rt.PrefillMissPlacement, rt.PrefillThresholds)
		c.Decode = roleRouting(rt.DecodePolicy, affinity.PlaceLeastLoad, rt.DecodeThresholds)
	}
	return c
}

func roleRouting(policy, placement string, th affinity.Thresholds) *store.RoleRouting {
	return &store.RoleRouting{Policy: policy, MissPlacement: placement, CacheThreshold: th.CacheThreshold,
		BalanceAbsThreshold: th.BalanceAbs, BalanceRelThreshold: th.BalanceRel}
}

// routingOf is the Routing a replica runs with under the registry's config
// c: the flags' settings with c's policies, placements and thresholds. A
// role c leaves unset keeps the flags'.
func (r *Replica) routingOf(c store.RoutingConfig) Routing {
	rt := r.cfg.Routing
	rt.Policy, rt.MissPlacement = c.Policy, c.MissPlacement
	rt.Thresholds = affinity.Thresholds{CacheThreshold: c.CacheThreshold, BalanceAbs: c.BalanceAbsThreshold,
		BalanceRel: c.BalanceRelThreshold}
	if p := c.Prefill; p != nil {
		rt.PrefillPolicy, rt.PrefillMissPlacement = p.Policy, p.MissPlacement
		rt.PrefillThresholds = affinity.Thresholds{CacheThreshold: p.CacheThreshold, BalanceAbs: p.BalanceAbsThreshold,
			BalanceRel: p.BalanceRelThreshold}
	}
	if d := c.Decode; d != nil {
		rt.DecodePolicy = d.Policy
		rt.DecodeThresholds = affinity.Thresholds{CacheThreshold: d.CacheThreshold, BalanceAbs: d.BalanceAbsThreshold,
			BalanceRel: d.BalanceRelThreshold}
	}
	// Hot-prefix spreading is one setting of the tier, for every role.
	for _, th := range []*affinity.Thresholds{&rt.Thresholds, &rt.PrefillThresholds, &rt.DecodeThresholds} {
		th.HotLoad, th.HotOwners = c.HotPrefixLoad, c.HotPrefixOwners
	}
	return rt
}

// checkRouting refuses a config this replica could not route with, as a
// 400 naming the field.
func (r *Replica) checkRouting(c store.RoutingConfig) error {
	if c.BlockSize != r.cfg.Routing.BlockSize {
		return &store.FieldError{Field: "config.block_size", Problem: fmt.Sprintf("%v: it is %d (--block-size), not %d",
			ErrBlockSizeFixed, r.cfg.Routing.BlockSize, c.BlockSize)}
	}
	if err := r.routingOf(c).Validate(); err != nil {
		return &store.FieldError{Field: "config", Problem: err.Error()}
	}
	return nil
}

// followRouting makes the proxy route with the registry's routing config
// when it differs from the one in use. Safe from any goroutine.
func (r *Replica) followRouting(reg *store.Registry) {
	r.routingMu.Lock()
	defer r.routingMu.Unlock()
	c := reg.RoutingConfig()
	if c == nil || c.Fingerprint() == r.routingInUse {
		return
	}
	if err := r.checkRouting(*c); err != nil {
		r.log.Error("the registry's routing config cannot be used here; routing as before", "err", err)
		r.routingInUse = c.Fingerprint()
		return
	}
	if err := r.useRouting(r.routingOf(*c)); err != nil {
		r.log.Error("building routers from the registry's routing config; routing as before", "err", err)
		return
	}
	r.routingInUse = c.Fingerprint()
	r.log.Info("routing with the registry's config", "policy", c.Policy, "miss_placement", c.MissPlacement,
		"cache_threshold", c.CacheThreshold, "index", reg.RoutingIndex())
}

// useRouting builds the routers of rt and hands them to the proxy.
func (r *Replica) useRouting(rt Routing) error {
	router, err := r.newRouter(rt.Policy, rt.Thresholds, rt.MissPlacement)
	if err != nil {
		return err
	}
	pd, err := r.disaggregationOf(rt)
	if err != nil {
		return err
	}
	if err := r.proxy.SetRouters(router, pd); err != nil {
		return err
	}
	r.core.SetThresholds(rt.Thresholds)
	return nil
}

// routingView is GET /cluster/routing.
func (r *Replica) routingView() adminapi.RoutingView {
	reg := r.fsm.View()
	if c := reg.RoutingConfig(); c != nil {
		return adminapi.RoutingView{Index: reg.RoutingIndex(), Config: *c, Source: "registry"}
	}
	return adminapi.RoutingView{Config: r.routingFromFlags(), Source: "flags"}
}

// setRouting is PUT /cluster/routing: replace the config set at index v.Index.
func (r *Replica) setRouting(ctx context.Context, v adminapi.RoutingView) (adminapi.RoutingView, error) {
	if err := r.checkRouting(v.Config); err != nil {
		return adminapi.RoutingView{}, err
	}
	res, err := r.apply(ctx, store.NewCompareAndSetRoutingConfig(v.Config, v.Index))
	if err != nil {
		return adminapi.RoutingView{}, err
	}
	return adminapi.RoutingView{Index: res.Index, Config: v.Config, Source: "registry"}, nil
}
