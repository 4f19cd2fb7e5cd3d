package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// Replica is one running router: the Raft-replicated registry, worker
// health, the ownership index and load table, the gossip of load, ownership
// and verdicts with the other replicas, and the HTTP front end, wired
// together. Start builds and starts it; Stop ends every part it started.
type Replica struct {
	cfg     Config
	log     *slog.Logger
	fsm     *store.FSM
	raft    *RaftNode
	monitor *health.Monitor
	loads   *affinity.LoadTable
	index   *affinity.Index
	proxy   *proxy.Proxy
	admin   *Admin
	metrics *metrics.Set
	sync    *loadsync.State // this replica's side of the gossip
	gossip  *loadsync.Gossip
	members *membership
	writes  *forwarder

	ln, metricsLn net.Listener
	debugLn       net.Listener // --debug-addr, nil when off
	apiAddr       string       // where peers reach ln
	loaded        atomic.Bool

	serving bool // the proxy took over ln; Stop shuts it down
	failed  chan error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	gauges workerGauges
}

// Start builds a replica from cfg and starts serving. It returns once the
// HTTP listener is bound and the command-line workers are in the registry.
func Start(ctx context.Context, cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replica{cfg: cfg, log: cfg.Logger, fsm: store.NewFSM(), metrics: metrics.NewSet(), failed: make(chan error, 1)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if err := r.build(); err != nil {
		_ = r.Stop(context.Background()) // what build made
		return nil, err
	}
	if err := r.serve(); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	if err := r.seed(ctx); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	return r, nil
}

// build creates the parts, leaves first, and joins the gossip last.
func (r *Replica) build() error {
	cfg := r.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := r.openRaft(); err != nil {
		return err
	}
	var err error
	r.monitor, err = health.New(cfg.Health, nil, r.log)
	if err != nil {
		return err
	}
	r.loads = affinity.NewLoadTable(func(w affinity.WorkerID) {
		r.log.Warn("in-flight count would have gone below zero; clamped", "worker", w)
	})
	r.index = affinity.NewIndex(affinity.SystemClock{}, int(cfg.Routing.MaxTreeSize/int64(cfg.Routing.BlockSize)))
	if r.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	r.apiAddr = advertisedAPIAddr(r.ln.Addr(), r.raft.Addr())
	r.warnIfWritesCannotBeForwarded()
	if r.sync, err = r.newGossipState(r.members.joined); err != nil {
		return err
	}
	if err := r.buildFrontEnd(); err != nil {
		return err
	}
	r.monitor.OnChange(r.healthChanged)
	r.registerClusterMetrics()
	return r.startGossip()
}

// openRaft opens the Raft node. A replica with neither --join nor
// --bootstrap-expect > 1 bootstraps a one-node cluster on a fresh data dir;
// the others wait for the gossip to gather the cluster (runMembership).
func (r *Replica) openRaft() error {
	cfg := r.cfg
	var err error
	r.raft, err = OpenRaft(RaftConfig{NodeID: cfg.NodeName, DataDir: cfg.DataDir, BindAddr: cfg.RaftBind,
		AdvertiseAddr: unlessPortZero(cfg.RaftAdvertise), Bootstrap: r.bootstrapsAlone(), Logger: r.log}, r.fsm)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, membershipTimeout)
	defer cancel()
	servers, err := r.raft.Servers(ctx)
	if err != nil {
		return fmt.Errorf("raft: reading the configuration: %w", err)
	}
	r.members = newMembership(len(servers) > 0)
	r.writes = newForwarder(r.raft, cfg.AdminToken, r.apiAddrOf)
	return nil
}

// warnIfWritesCannotBeForwarded warns about a cluster whose followers
// cannot forward admin writes: without a token the admin API serves
// loopback clients only, and the peers are not loopback clients.
func (r *Replica) warnIfWritesCannotBeForwarded() {
	host, _, _ := net.SplitHostPort(r.apiAddr)
	if ip := net.ParseIP(host); r.bootstrapsAlone() || r.cfg.AdminToken != "" || ip != nil && ip.IsLoopback() {
		return
	}
	r.log.Warn("without --admin-token, replicas on other hosts cannot forward registry writes to the leader",
		"api", r.apiAddr)
}

// bootstrapsAlone says whether this replica forms a one-node cluster.
func (r *Replica) bootstrapsAlone() bool { return len(r.cfg.Join) == 0 && r.cfg.BootstrapExpect == 1 }

// buildFrontEnd creates the routers, the admin API and the proxy.
func (r *Replica) buildFrontEnd() error {
	cfg := r.cfg
	router, err := r.newRouter(cfg.Routing.Policy, cfg.Routing.Thresholds, cfg.Routing.MissPlacement)
	if err != nil {
		return err
	}
	pd, err := r.disaggregation()
	if err != nil {
		return err
	}
	r.admin = NewAdmin(AdminConfig{Token: cfg.AdminToken, Registry: r.fsm.View, Apply: r.apply,
		ApplyLocal: r.raft.Apply, Loads: r.workerLoads, Status: func() any { return r.status() },
		AllowWorker: cfg.Proxy.WorkerHosts.Allows})
	r.proxy, err = proxy.New(cfg.Proxy, proxy.Deps{Loads: r.loads, Index: r.index, Router: router,
		Health: healthGate{r.monitor}, Metrics: r.metrics, Logger: r.log, Admin: r.admin.Serve,
		RegistryLoaded: r.loaded.Load, PD: pd})
	return err
}

// apiAddrOf is the HTTP API address that replica node announced.
func (r *Replica) apiAddrOf(node string) (string, bool) {
	if r.gossip == nil {
		return "", false
	}
	for _, m := range r.gossip.Members() {
		if m.Name == node && m.Tags[tagAPI] != "" {
			return m.Tags[tagAPI], true
		}
	}
	return "", false
}

// newRouter binds a policy to this replica's load table and index.
func (r *Replica) newRouter(policy string, th affinity.Thresholds, placement string) (*affinity.Router, error) {
	p, err := affinity.NewPolicy(affinity.Settings{Policy: policy, Thresholds: th, MissPlacement: placement,
		BlockSize: r.cfg.Routing.BlockSize}, r.index)
	if err != nil {
		return nil, err
	}
	return affinity.NewRouter(p, r.loads, r.index, r.cfg.Routing.BlockSize, ownershipSink{r.sync}), nil
}

// disaggregation builds the per-role routers of prefill/decode mode, nil
// when it is off. Role thresholds were defaulted to the global ones by the
// command line, so they hold whichever policy each role uses.
func (r *Replica) disaggregation() (*proxy.PD, error) {
	rt := r.cfg.Routing
	if rt.PD == "" {
		return nil, nil
	}
	prefill, err := r.newRouter(rt.PrefillPolicy, rt.PrefillThresholds, rt.PrefillMissPlacement)
	if err != nil {
		return nil, err
	}
	decode, err := r.newRouter(rt.DecodePolicy, rt.DecodeThresholds, affinity.PlaceLeastLoad)
	if err != nil {
		return nil, err
	}
	return &proxy.PD{Mode: rt.PD, Prefill: prefill, Decode: decode}, nil
}

// serve starts serving on the bound listener, binds the metrics listener
// and starts the background loops.
func (r *Replica) serve() error {
	var err error
	r.serving = true
	r.goRun(r.serveAPI)
	if r.cfg.MetricsAddr != "" {
		if r.metricsLn, err = net.Listen("tcp", r.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("--prometheus-port: %w", err)
		}
		r.goRun(func() { serveMetrics(r.ctx, r.metricsLn, r.metrics) })
	}
	if r.cfg.DebugAddr != "" {
		if r.debugLn, err = net.Listen("tcp", r.cfg.DebugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
		r.goRun(func() { serveDebug(r.ctx, r.debugLn) })
	}
	r.goRun(r.followRegistry)
	r.goRun(func() { _ = r.monitor.Run(r.ctx) })
	r.goRun(r.sweepIndex)
	r.goRun(r.runMembership)
	return nil
}

// serveAPI serves the HTTP API until Stop. A listener that fails for good
// (the accept loop retries what passes, such as running out of
// descriptors) fails the replica: its owner should exit, so that the load
// balancer stops sending to an API that no longer answers.
func (r *Replica) serveAPI() {
	err := r.proxy.Serve(r.ln)
	if err == nil || r.ctx.Err() != nil {
		return
	}
	r.log.Error("the HTTP listener failed; the replica cannot serve", "err", err)
	r.failed <- fmt.Errorf("--port: the listener failed: %w", err)
}

// Failed delivers the error that ended the replica's ability to serve, if
// one does; its owner should stop it and exit non-zero.
func (r *Replica) Failed() <-chan error { return r.failed }

// goRun starts fn as a goroutine that Stop waits for.
func (r *Replica) goRun(fn func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn()
	}()
}

// HTTPAddr is the address the API listens on.
func (r *Replica) HTTPAddr() string { return r.ln.Addr().String() }

// DebugAddr is where the profiles are served, "" when --debug-addr is off.
func (r *Replica) DebugAddr() string {
	if r.debugLn == nil {
		return ""
	}
	return r.debugLn.Addr().String()
}

// GossipAddr is the memberlist address other replicas --join.
func (r *Replica) GossipAddr() string { return r.gossip.LocalAddr() }

// RaftAddr is the address the Raft transport is reached at.
func (r *Replica) RaftAddr() string { return r.raft.Addr() }

// Stop stops serving, leaves the gossip (so the peers drop this replica's
// load at once) and closes every part, waiting for all goroutines.
func (r *Replica) Stop(ctx context.Context) error { return r.stop(ctx, true) }

// stop is Stop; leave=false skips the gossip leave, as a crash would.
func (r *Replica) stop(ctx context.Context, leave bool) error {
	var errs []error
	if r.proxy != nil {
		errs = append(errs, r.proxy.Shutdown(ctx))
	}
	r.cancel()
	if r.metricsLn != nil {
		r.metricsLn.Close()
	}
	if r.debugLn != nil {
		r.debugLn.Close()
	}
	r.wg.Wait()
	if r.gossip != nil {
		errs = append(errs, r.stopGossip(leave))
	}
	errs = append(errs, r.closeParts())
	return errors.Join(errs...)
}

func (r *Replica) stopGossip(leave bool) error {
	if leave {
		return r.gossip.Stop()
	}
	return r.gossip.Kill()
}

// closeParts closes what build opened and serve did not take over.
func (r *Replica) closeParts() error {
	var errs []error
	if r.ln != nil && !r.serving {
		errs = append(errs, r.ln.Close())
	}
	if r.writes != nil {
		r.writes.close()
	}
	if r.raft != nil {
		errs = append(errs, r.raft.Close())
	}
	return errors.Join(errs...)
}

// seed adds the command-line workers and the routing config to the registry,
// through the leader; both are idempotent. A replica alone does it before
// Start returns, so a bad start fails at once; a member of a cluster does it
// in the background, since the cluster may form only after others start.
func (r *Replica) seed(ctx context.Context) error {
	if r.bootstrapsAlone() {
		return r.seedNow(ctx, seedTimeout)
	}
	r.goRun(r.seedInBackground)
	return nil
}

// seedTimeout bounds one attempt at seeding.
const seedTimeout = 30 * time.Second

// seedInBackground retries seeding every second until it succeeds, the
// registry's routing config is found to differ, or the replica stops.
func (r *Replica) seedInBackground() {
	for {
		err := r.seedNow(r.ctx, membershipTimeout)
		switch {
		case err == nil:
			return
		case errors.Is(err, store.ErrConfigMismatch):
			r.log.Error("the registry's routing config differs from this replica's; not seeding", "err", err)
			return
		case r.ctx.Err() != nil:
			return
		}
		r.log.Debug("seeding the registry; will retry", "err", err)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *Replica) seedNow(ctx context.Context, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := r.raft.WaitForLeader(wait); err != nil {
		return fmt.Errorf("no raft leader to register workers with: %w", err)
	}
	if r.raft.IsLeader() {
		// Read the registry only after the log before us is applied.
		if err := r.raft.Barrier(wait); err != nil {
			return fmt.Errorf("catching up with the raft log: %w", err)
		}
	}
	if err := r.agreeOnRouting(wait); err != nil {
		return err
	}
	for _, s := range r.cfg.Seeds {
		cmd := store.NewAddWorker(store.AddWorker{URL: s.URL, Role: store.Role(s.Role), BootstrapPort: s.BootstrapPort})
		if _, err := r.apply(wait, cmd); err != nil {
			return fmt.Errorf("registering %s: %w", s.URL, err)
		}
	}
	return nil
}

// agreeOnRouting records this replica's routing config in the registry when
// none is there yet, and refuses to run with one that differs.
func (r *Replica) agreeOnRouting(ctx context.Context) error {
	mine := r.routingConfig()
	if have := r.fsm.View().RoutingConfig(); have != nil {
		return have.Diff(mine)
	}
	_, err := r.apply(ctx, store.NewSetRoutingConfig(mine))
	return err
}

func (r *Replica) routingConfig() store.RoutingConfig {
	rt := r.cfg.Routing
	return store.RoutingConfig{BlockSize: rt.BlockSize, Policy: rt.Policy, MissPlacement: rt.MissPlacement,
		CacheThreshold: rt.Thresholds.CacheThreshold, BalanceAbsThreshold: rt.Thresholds.BalanceAbs,
		BalanceRelThreshold: rt.Thresholds.BalanceRel}
}

// apply writes a command through Raft, forwarding it to the leader when
// this replica is a follower.
func (r *Replica) apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	return r.writes.Apply(ctx, cmd)
}

// followRegistry hands every new registry to the proxy and the monitor.
func (r *Replica) followRegistry() {
	for {
		reg, changed := r.fsm.Watch()
		r.useRegistry(reg)
		select {
		case <-changed:
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *Replica) useRegistry(reg *store.Registry) {
	workers := reg.Workers()
	ws := make([]proxy.Worker, 0, len(workers))
	targets := make([]health.Target, 0, len(workers))
	for _, w := range workers {
		ws = append(ws, proxy.Worker{ID: affinity.WorkerID(w.ID), URL: w.URL, Role: string(w.Role), Model: w.Model,
			BootstrapPort: w.BootstrapPort, Draining: w.State == store.StateDraining})
		targets = append(targets, health.Target{ID: health.WorkerID(w.ID), URL: w.URL, Group: string(w.Role) + "/" + w.Model})
	}
	if err := r.monitor.SetWorkers(targets); err != nil {
		r.log.Warn("some workers cannot be health-checked", "err", err)
	}
	r.proxy.Fleet().SetWorkers(ws)
	r.gauges.sync(r.metrics, workers, r.monitor)
	r.loaded.Store(true)
}

// healthChanged republishes the proxy's view and forgets the prefixes of
// workers that failed their health checks: an engine that went away lost its
// cache, so its old prefixes must be misses when it comes back.
func (r *Replica) healthChanged() {
	for _, s := range r.monitor.Statuses() {
		if !s.Healthy {
			r.index.Forget(affinity.WorkerID(s.ID))
		}
	}
	r.proxy.Fleet().Refresh()
}

// sweepIndex expires idle ownership facts every --eviction-interval when
// --prefix-ttl is set.
func (r *Replica) sweepIndex() {
	t := time.NewTicker(r.cfg.Routing.EvictionInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if ttl := r.cfg.Routing.PrefixTTL; ttl > 0 {
				r.index.Expire(time.Now().Add(-ttl))
			}
		case <-r.ctx.Done():
			return
		}
	}
}

// workerLoads is the /get_loads view: merged and local in-flight counts with
// health and drain state.
func (r *Replica) workerLoads() []WorkerLoad {
	reg := r.fsm.View()
	out := make([]WorkerLoad, 0, reg.Len())
	for _, w := range reg.Workers() {
		l := r.loads.Get(affinity.WorkerID(w.ID))
		st, _ := r.monitor.Status(health.WorkerID(w.ID))
		out = append(out, WorkerLoad{ID: w.ID, URL: w.URL, Role: string(w.Role), Load: l.Merged(),
			LocalLoad: l.Local(), Healthy: st.Eligible, State: string(w.State)})
	}
	return out
}
