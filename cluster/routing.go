package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/proxy"
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

// routingFollower builds the replica's routers and makes the proxy route
// with the registry's routing config once there is one; flags are the
// replica's own settings, which seed a fresh registry. Its methods are safe
// from any goroutine once proxy is set.
type routingFollower struct {
	flags Routing
	core  *core.Replica
	fsm   *store.FSM
	proxy *proxy.Proxy // set once built, after the routers it starts with
	apply func(ctx context.Context, cmd store.Command) (store.Result, error)
	log   *slog.Logger

	// mu guards inUse, the fingerprint of the registry's routing config the
	// proxy routes with ("" while it routes with the flags).
	mu    sync.Mutex
	inUse string
}

// newRouter binds a policy to this replica's core.
func (f *routingFollower) newRouter(policy string, th affinity.Thresholds, placement string) (*affinity.Router, error) {
	return f.core.NewRouter(affinity.Settings{Policy: policy, Thresholds: th, MissPlacement: placement})
}

// disaggregationOf builds the per-role routers of prefill/decode mode, nil
// when it is off. Role thresholds were defaulted to the global ones by the
// command line, so they hold whichever policy each role uses.
func (f *routingFollower) disaggregationOf(rt Routing) (*proxy.PD, error) {
	if rt.PD == "" {
		return nil, nil
	}
	prefill, err := f.newRouter(rt.PrefillPolicy, rt.PrefillThresholds, rt.PrefillMissPlacement)
	if err != nil {
		return nil, err
	}
	decode, err := f.newRouter(rt.DecodePolicy, rt.DecodeThresholds, affinity.PlaceLeastLoad)
	if err != nil {
		return nil, err
	}
	return &proxy.PD{Mode: rt.PD, Prefill: prefill, Decode: decode}, nil
}

// sameBlockSize is the block-size invariant, checked here alone: a replica
// hashes with its own --block-size, so a registry config of another block
// size (seeded by another replica, or written through the admin API) is
// one its hashes would mean nothing under. The gossip compares the block
// size of replicas at join (Routing.clusterConfig).
func (f *routingFollower) sameBlockSize(c store.RoutingConfig) error {
	if c.BlockSize == f.flags.BlockSize {
		return nil
	}
	return &store.ConfigMismatchError{Field: "block_size", Local: fmt.Sprint(f.flags.BlockSize), Remote: fmt.Sprint(c.BlockSize)}
}

// registryBlockSize refuses to run with another block size than the
// registry's.
func (f *routingFollower) registryBlockSize() error {
	c := f.fsm.View().RoutingConfig()
	if c == nil {
		return nil
	}
	if err := f.sameBlockSize(*c); err != nil {
		return fmt.Errorf("--block-size: %w", err)
	}
	return nil
}

// fromFlags is the routing config this replica's flags describe,
// what it seeds a fresh registry with.
func (f *routingFollower) fromFlags() store.RoutingConfig {
	rt := f.flags
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

// of is the Routing a replica runs with under the registry's config
// c: the flags' settings with c's policies, placements and thresholds. A
// role c leaves unset keeps the flags'.
func (f *routingFollower) of(c store.RoutingConfig) Routing {
	rt := f.flags
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

// check refuses a config this replica could not route with, as a
// 400 naming the field.
func (f *routingFollower) check(c store.RoutingConfig) error {
	if f.sameBlockSize(c) != nil {
		return &store.FieldError{Field: "config.block_size", Problem: fmt.Sprintf("%v: it is %d (--block-size), not %d",
			ErrBlockSizeFixed, f.flags.BlockSize, c.BlockSize)}
	}
	if err := f.of(c).Validate(); err != nil {
		return &store.FieldError{Field: "config", Problem: err.Error()}
	}
	return nil
}

// follow makes the proxy route with the registry's routing config
// when it differs from the one in use. Safe from any goroutine.
func (f *routingFollower) follow(reg *store.Registry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := reg.RoutingConfig()
	if c == nil || c.Fingerprint() == f.inUse {
		return
	}
	if err := f.check(*c); err != nil {
		f.log.Error("the registry's routing config cannot be used here; routing as before", "err", err)
		f.inUse = c.Fingerprint()
		return
	}
	if err := f.use(f.of(*c)); err != nil {
		f.log.Error("building routers from the registry's routing config; routing as before", "err", err)
		return
	}
	f.inUse = c.Fingerprint()
	f.log.Info("routing with the registry's config", "policy", c.Policy, "miss_placement", c.MissPlacement,
		"cache_threshold", c.CacheThreshold, "index", reg.RoutingIndex())
}

// use builds the routers of rt and hands them to the proxy.
func (f *routingFollower) use(rt Routing) error {
	router, err := f.newRouter(rt.Policy, rt.Thresholds, rt.MissPlacement)
	if err != nil {
		return err
	}
	pd, err := f.disaggregationOf(rt)
	if err != nil {
		return err
	}
	if err := f.proxy.SetRouters(router, pd); err != nil {
		return err
	}
	f.core.SetThresholds(rt.Thresholds)
	return nil
}

// view is GET /cluster/routing.
func (f *routingFollower) view() adminapi.RoutingView {
	reg := f.fsm.View()
	if c := reg.RoutingConfig(); c != nil {
		return adminapi.RoutingView{Index: reg.RoutingIndex(), Config: *c, Source: "registry"}
	}
	return adminapi.RoutingView{Config: f.fromFlags(), Source: "flags"}
}

// set is PUT /cluster/routing: replace the config set at index v.Index.
func (f *routingFollower) set(ctx context.Context, v adminapi.RoutingView) (adminapi.RoutingView, error) {
	if err := f.check(v.Config); err != nil {
		return adminapi.RoutingView{}, err
	}
	res, err := f.apply(ctx, store.NewCompareAndSetRoutingConfig(v.Config, v.Index))
	if err != nil {
		return adminapi.RoutingView{}, err
	}
	return adminapi.RoutingView{Index: res.Index, Config: v.Config, Source: "registry"}, nil
}
