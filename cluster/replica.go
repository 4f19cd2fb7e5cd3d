package cluster

import (
	"bytes"
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
	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/workerurl"
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
	raft    *raftnode.Node
	monitor *health.Monitor
	dialer  *workerurl.Dialer // every connection to a worker
	// core is the replica's routing state (core): loads, index and
	// sync are its load table, ownership index and side of the gossip.
	core    *core.Replica
	loads   *affinity.LoadTable
	index   *affinity.Index
	sync    *loadsync.State
	proxy   *proxy.Proxy
	admin   *admin.Admin
	metrics *metrics.Set
	// gossip is the memberlist side; a pointer swapped only by tests that
	// cut a replica off the gossip and reopen it (cutGossip, heal_helpers_test.go).
	gossip atomic.Pointer[loadsync.Gossip]
	// gossipAddr is the gossip's address, read once at start.
	gossipAddr string
	members    *membership.Membership
	writes     *raftnode.Forwarder
	rpc        *link.Client // to the peers' cluster ports
	keyrings   keyringFanout
	placer     *placing // nil with --placer=false
	reloads    reloaders

	// routing builds the routers and follows the registry's routing
	// config (routing.go).
	routing *routingFollower
	// admission bridges the door, the monitor and the gossip (admission.go).
	admission *admissionBridge
	// views answer the admin API's reads (status.go, workerstats.go,
	// history.go).
	views *adminViews

	ln, metricsLn net.Listener
	debugLn       net.Listener  // --debug-addr, nil when off
	apiAddr       string        // where peers reach ln
	loaded        atomic.Bool   // the registry is the cluster's: see ready.go
	peerHeard     atomic.Int64  // unix nanos of the latest peer report seen (peerContact)
	ready         chan struct{} // closed when loaded and the workers probed

	serving bool // the proxy took over ln; Stop shuts it down
	failed  chan error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	gauges workerGauges
	kv     *kvHub // nil unless --kv-events
	// history is the last minutes of this replica's worker figures, for
	// the status page (history.go).
	history *sampleRing
	// clock is the time the replica's loops read (Config.Clock).
	clock clock.WithTicker
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
	r := &Replica{cfg: cfg, log: cfg.Logger, fsm: store.NewFSM(), metrics: metrics.NewSet(), failed: make(chan error, 1),
		ready: make(chan struct{}), history: newSampleRing(int(historySpan / historyEvery))}
	r.clock = cfg.Clock
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	// Until Start returns, the caller's ctx (a signal, say) ends what
	// Start waits for: a --join that nobody answers yet, the seeding.
	stopFollowing := context.AfterFunc(ctx, r.cancel)
	defer stopFollowing()
	if err := r.build(); err != nil {
		_ = r.Stop(context.Background()) // what build made
		return nil, err
	}
	r.serve()
	if err := r.seed(ctx); err != nil {
		_ = r.Stop(context.Background())
		return nil, err
	}
	// After the seeding: a lone replica's seeds are in its registry by now,
	// and are to be probed before it is ready.
	r.goRun(r.becomeReady)
	if r.bootstrapsAlone() {
		// A lone replica is ready at once: let Start return when it is.
		select {
		case <-r.ready:
		case <-ctx.Done():
		}
	}
	return r, nil
}

// awaitFirstProbes waits, at most a health-check timeout and a second, until
// every registered worker has answered its first health check: a worker is
// not eligible before, and a replica that says it is ready should route at
// once.
func (r *Replica) awaitFirstProbes(ctx context.Context) {
	reg := r.fsm.View()
	ids := make([]health.WorkerID, 0, reg.Len())
	for _, w := range reg.Workers() {
		ids = append(ids, health.WorkerID(w.ID))
	}
	wait, cancel := context.WithTimeout(ctx, r.cfg.Health.Timeout+time.Second)
	defer cancel()
	if err := r.monitor.AwaitProbed(wait, ids...); err != nil {
		r.log.Warn("not every worker has answered its first health check yet", "err", err)
	}
	r.healthChanged() // publish now what the OnChange delivery would publish a moment later
}

// build creates the parts, leaves first, and joins the gossip last. The
// listeners come first of all, so that a port in use is refused at once.
func (r *Replica) build() error {
	cfg := r.cfg
	if err := r.listen(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := r.openRaft(); err != nil {
		return err
	}
	r.warnIfInsecure()
	var err error
	// One dialer for every connection to a worker, health's and the proxy's.
	r.dialer = &workerurl.Dialer{Policy: cfg.Proxy.WorkerHosts}
	hcfg := cfg.Health
	hcfg.Dialer = r.dialer
	r.monitor, err = health.New(hcfg, nil, r.log)
	if err != nil {
		return err
	}
	r.apiAddr = advertisedAPIAddr(r.ln.Addr(), r.raft.Addr())
	r.admission = &admissionBridge{engines: r.monitor.Engines()}
	if err := r.newCore(); err != nil {
		return err
	}
	if err := r.buildFrontEnd(); err != nil {
		return err
	}
	r.monitor.OnChange(r.healthChanged)
	r.monitor.SetPeerContact(r.peerContact)
	clusterFamilies{ctx: r.ctx, raft: r.raft, fsm: r.fsm, monitor: r.monitor, sync: r.sync, core: r.core, index: r.index,
		gossip: r.gossiper, loaded: r.loaded.Load}.register(r.metrics)
	r.registerLoRA(r.metrics)
	return r.startGossip()
}

// openRaft opens the Raft node. A replica with neither --join nor
// --bootstrap-expect > 1 bootstraps a one-node cluster on a fresh data dir;
// the others wait for the gossip to gather the cluster (membership.Run).
func (r *Replica) openRaft() error {
	cfg := r.cfg
	var err error
	r.raft, err = raftnode.Open(raftnode.Config{NodeID: cfg.NodeName, DataDir: cfg.DataDir, BindAddr: cfg.RaftBind,
		AdvertiseAddr: unlessPortZero(cfg.RaftAdvertise), TLS: cfg.ClusterTLS, Bootstrap: r.bootstrapsAlone(),
		Timings: cfg.RaftTimings, Logger: r.log}, r.fsm)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, membership.Timeout)
	defer cancel()
	servers, err := r.raft.Servers(ctx)
	if err != nil {
		return fmt.Errorf("raft: reading the configuration: %w", err)
	}
	r.members = r.newMembership(len(servers) > 0)
	r.rpc = link.NewClient(r.raft.Port(), rpcTimeout)
	r.keyrings = keyringFanout{node: cfg.NodeName, gossip: r.gossiper, rpc: r.rpc, log: r.log}
	r.writes = raftnode.NewForwarder(r.raft, r.rpc)
	if t := r.raft.Port().TLS(); t != nil {
		r.reloads.add("cluster TLS", t.Reload)
	}
	return nil
}

// listen binds the API listener, the --prometheus-port one and the
// --debug-addr one, so that a port in use is refused at start.
func (r *Replica) listen() error {
	var err error
	if r.ln, err = net.Listen("tcp", r.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	if r.cfg.MetricsAddr != "" {
		if r.metricsLn, err = net.Listen("tcp", r.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("--prometheus-port: %w", err)
		}
	}
	if r.cfg.DebugAddr != "" {
		if r.debugLn, err = net.Listen("tcp", r.cfg.DebugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
	}
	return nil
}

// bootstrapsAlone says whether this replica forms a one-node cluster.
func (r *Replica) bootstrapsAlone() bool { return len(r.cfg.Join) == 0 && r.cfg.BootstrapExpect == 1 }

// buildFrontEnd creates the routers, the admin API and the proxy.
func (r *Replica) buildFrontEnd() error {
	cfg := r.cfg
	r.routing = &routingFollower{flags: cfg.Routing, core: r.core, fsm: r.fsm, apply: r.apply, log: r.log}
	router, err := r.routing.newRouter(cfg.Routing.Policy, cfg.Routing.Thresholds, cfg.Routing.MissPlacement)
	if err != nil {
		return err
	}
	pd, err := r.routing.disaggregationOf(cfg.Routing)
	if err != nil {
		return err
	}
	r.views = &adminViews{ctx: r.ctx, node: cfg.NodeName, raft: r.raft, fsm: r.fsm, gossip: r.gossiper, members: r.members,
		sync: r.sync, loads: r.loads, monitor: r.monitor, clock: r.clock, history: r.history, kv: r.kv}
	r.admin = admin.New(admin.Config{Token: cfg.AdminToken, Registry: r.fsm.View, Apply: r.apply,
		ApplyLocal: r.raft.Apply, Loads: r.views.workerLoads, Status: func() any { return r.views.status() },
		WorkerStats: func() any { return r.views.workerStats() }, History: func() any { return r.views.historyView() },
		Routing: r.routing.view, SetRouting: r.routing.set,
		Keyring: r.keyrings.everywhere, AllowWorker: cfg.Proxy.WorkerHosts.Allows,
		FlushCache:  func(ctx *fasthttp.RequestCtx) { r.proxy.ServeFlushCache(ctx) },
		MoveStreams: func(id store.WorkerID) int { return r.proxy.MoveStreams(affinity.WorkerID(id)) },
		StreamsOn:   func(id store.WorkerID) int { return r.proxy.StreamsOn(affinity.WorkerID(id)) }})
	decider, err := r.decider()
	if err != nil {
		return err
	}
	pcfg := cfg.Proxy
	pcfg.LoRA = cfg.LoRA.proxyConfig(cfg.Health)
	r.proxy, err = proxy.New(pcfg, proxy.Deps{Loads: r.loads, Index: r.index, Router: router,
		Health: healthGate{r.monitor}, Metrics: r.metrics, Logger: r.log, Admin: r.admin.Serve,
		RegistryLoaded: r.loaded.Load, Ready: r.ready, PD: pd, Tracer: cfg.Tracer, AdminToken: r.admin,
		Dialer: r.dialer, Decider: decider, Engines: r.admission.engineReadings, OwnerSecrets: r.ownerSecrets})
	r.routing.proxy = r.proxy
	if r.proxy != nil {
		r.admission.door = r.proxy.Door()
	}
	r.views.proxy = r.proxy
	if err == nil && cfg.Proxy.TLSCertPath != "" {
		r.reloads.add("client TLS", r.proxy.ReloadTLS)
	}
	return err
}

// decider is what the proxy decides with: the core, with cold requests
// asked of the placer unless --placer=false.
func (r *Replica) decider() (proxy.Decider, error) {
	if !r.cfg.Placer {
		return r.core, nil
	}
	placement, err := r.core.NewPlacement(core.PlacementConfig{IsPlacer: r.raft.IsLeader, Timeout: r.cfg.PlacerTimeout,
		Placer: func() string { _, addr := r.raft.Leader(); return addr }})
	if err != nil {
		return nil, err
	}
	counts := newPlacerCounts(r.metrics)
	rpc := link.NewQuick(r.raft.Port())
	rpc.Waited = func(d time.Duration) { counts.connWait.Update(d.Seconds()) }
	r.placer = &placing{Replica: r.core, placement: placement, rpc: rpc, counts: counts, log: r.log,
		router: func() *affinity.Router { return r.proxy.DecidingRouter() }}
	return r.placer, nil
}

// serve starts serving on the bound listeners, the peers' HTTP on the
// cluster port, and the background loops.
func (r *Replica) serve() {
	r.serving = true
	r.goRun(r.serveAPI)
	if r.metricsLn != nil {
		r.goRun(func() { serveMetrics(r.ctx, r.metricsLn, r.metrics) })
	}
	r.goRun(func() { serveRPC(r.ctx, r.raft.Port(), r.rpcRoutes()) })
	if r.debugLn != nil {
		r.goRun(func() { serveDebug(r.ctx, r.debugLn) })
	}
	r.goRun(r.followRegistry)
	r.goRun(func() { _ = r.monitor.Run(r.ctx) })
	r.goRun(r.countLiveReplicas)
	r.goRun(r.sweepIndex)
	if r.kv != nil {
		r.goRun(r.feedKVReadings)
	}
	if r.cfg.LoRA.Residency {
		r.goRun(r.feedAdapterReadings)
	}
	r.goRun(func() { r.members.Run(r.ctx) })
	r.goRun(func() { r.members.RunRejoin(r.ctx, r.gossipAddr) })
	r.goRun(r.views.recordHistory)
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

// ownerSecrets are the secrets the tier shares, for the seals of stored
// responses' owners (proxy.Deps.OwnerSecrets): the gossip keyring, its
// primary first, so that a key rotation seals with the new key and still
// accepts what the old one sealed until it is removed. None without a
// gossip key: each replica then seals with a secret of its own.
func (r *Replica) ownerSecrets() [][]byte {
	g := r.gossiper()
	if g == nil {
		return nil
	}
	kr, err := g.Keyring()
	if err != nil {
		return nil
	}
	secrets := [][]byte{kr.Primary}
	for _, k := range kr.Keys {
		if !bytes.Equal(k, kr.Primary) {
			secrets = append(secrets, k)
		}
	}
	return secrets
}

// gossiper is the replica's gossip node, nil before build made it.
func (r *Replica) gossiper() *loadsync.Gossip { return r.gossip.Load() }

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
func (r *Replica) GossipAddr() string { return r.gossipAddr }

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
	r.cancel() // before the listener closes, so serveAPI sees a stop, not a failure
	if r.serving {
		// Shutdown does nothing to a Serve that has not registered its
		// listener yet (a Start that fails right after serve): closing the
		// listener makes that Serve return at once.
		_ = r.ln.Close()
	}
	r.wg.Wait()
	if r.gossiper() != nil {
		errs = append(errs, r.stopGossip(leave))
	}
	r.kv.close()
	errs = append(errs, r.closeParts())
	return errors.Join(errs...)
}

func (r *Replica) stopGossip(leave bool) error {
	if !leave {
		return r.gossiper().Kill()
	}
	// Say that this is a leave, not a death, so that the peers' status
	// pages tell the truth (memberlist's events do not), to every peer
	// before the leave can overtake it.
	tags := r.gossipTags(r.members.Joined())
	tags[membership.TagLeaving] = "1"
	if err := r.gossiper().SetTagsEverywhere(tags); err != nil {
		r.log.Debug("announcing the leave", "err", err)
	}
	return r.gossiper().Stop()
}

// closeParts closes what build opened and serve did not take over.
func (r *Replica) closeParts() error {
	var errs []error
	if !r.serving {
		for _, ln := range []net.Listener{r.ln, r.metricsLn, r.debugLn} {
			if ln != nil {
				errs = append(errs, ln.Close())
			}
		}
	}
	if r.rpc != nil {
		r.rpc.Close()
	}
	if r.placer != nil {
		r.placer.rpc.Close()
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
		err := r.seedNow(r.ctx, membership.Timeout)
		switch {
		case err == nil:
			return
		case errors.Is(err, store.ErrConfigMismatch):
			r.log.Error("the registry's block size differs from this replica's; its hashes mean nothing to the others", "err", err)
			return
		case r.ctx.Err() != nil:
			return
		}
		r.log.Debug("seeding the registry; will retry", "err", err)
		select {
		case <-r.ctx.Done():
			return
		case <-r.clock.After(time.Second):
		}
	}
}

func (r *Replica) seedNow(ctx context.Context, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := r.raft.WaitForLeader(wait); err != nil {
		return fmt.Errorf("no raft leader to register workers with: %w", err)
	}
	routing := r.routing.fromFlags()
	seed := store.Seed{Routing: &routing}
	for _, s := range r.cfg.Seeds {
		seed.Workers = append(seed.Workers, store.AddWorker{URL: s.URL, Role: store.Role(s.Role), BootstrapPort: s.BootstrapPort,
			KVEventsEndpoint: s.KVEventsEndpoint})
	}
	res, err := r.apply(wait, store.NewSeed(seed))
	if err != nil {
		return fmt.Errorf("seeding the registry: %w", err)
	}
	if !res.Created && len(r.cfg.Seeds) > 0 {
		r.log.Info("the registry was seeded before: --worker-urls, --prefill and --decode are not applied again; change workers through the admin API")
	}
	if err := r.awaitApplied(wait, res.Index); err != nil {
		return err
	}
	return r.routing.registryBlockSize()
}

// awaitApplied waits until this replica's registry reflects log index
// index (a write forwarded to the leader reaches the follower a moment
// later).
func (r *Replica) awaitApplied(ctx context.Context, index uint64) error {
	for {
		reg, changed := r.fsm.Watch()
		if reg.Index() >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the registry to reach index %d: %w", index, ctx.Err())
		}
	}
}

// apply writes a command through Raft, forwarding it to the leader when
// this replica is a follower.
func (r *Replica) apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	return r.writes.Apply(ctx, cmd)
}

// followRegistry hands every new registry to the proxy and the monitor,
// and says once when the registry halted (store/halt.go).
func (r *Replica) followRegistry() {
	halted := false
	for {
		reg, changed := r.fsm.Watch()
		r.useRegistry(reg)
		if err := r.fsm.Halted(); err != nil && !halted {
			halted = true
			r.log.Error("the registry halted: a newer build wrote a log entry this build cannot read; "+
				"it routes on the registry it has until a build that reads it starts on --data-dir", "err", err)
		}
		select {
		case <-changed:
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *Replica) useRegistry(reg *store.Registry) {
	workers := reg.Workers()
	ids := make([]affinity.WorkerID, 0, len(workers))
	for _, w := range workers {
		ids = append(ids, affinity.WorkerID(w.ID))
	}
	r.core.SetRegistry(ids)
	ws := make([]proxy.Worker, 0, len(workers))
	targets := make([]health.Target, 0, len(workers))
	for _, w := range workers {
		ws = append(ws, proxy.Worker{ID: affinity.WorkerID(w.ID), URL: w.URL, Role: string(w.Role), Model: w.Model,
			BootstrapPort: w.BootstrapPort, Draining: w.State == store.StateDraining})
		targets = append(targets, health.Target{ID: health.WorkerID(w.ID), URL: w.URL, Group: string(w.Role) + "/" + w.Model,
			Model: w.Model})
	}
	if err := r.monitor.SetWorkers(targets); err != nil {
		r.log.Warn("some workers cannot be health-checked", "err", err)
	}
	r.proxy.Fleet().SetWorkers(ws)
	r.kv.sync(workers)
	r.gauges.sync(r.metrics, workers, r.monitor)
	r.routing.follow(reg)
}

// healthChanged tells the core which workers failed their health checks
// (it forgets their prefixes) and republishes the proxy's view. A worker
// not probed yet is not down.
func (r *Replica) healthChanged() {
	var down []affinity.WorkerID
	for _, s := range r.monitor.Statuses() {
		if s.Probed && !s.Healthy {
			down = append(down, affinity.WorkerID(s.ID))
		}
	}
	r.core.HealthChanged(down)
	r.proxy.Fleet().Refresh()
}

// countLiveReplicas tells the monitor, every second, how many replicas the
// gossip sees live, so that a peer's verdict takes a worker out only with a
// quorum behind it, and the load table, so that selection counts the peers'
// expected share of a burst (affinity.LoadTable.SetPeerShare).
func (r *Replica) countLiveReplicas() {
	t := r.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		live := len(r.gossiper().Members())
		r.monitor.SetLiveReplicas(live)
		r.core.SetPeers(live-1, r.sync.Config().ReportLag())
		select {
		case <-t.C():
		case <-r.ctx.Done():
			return
		}
	}
}

// sweepIndex expires idle ownership facts every --eviction-interval when
// --prefix-ttl is set.
func (r *Replica) sweepIndex() {
	t := r.clock.NewTicker(r.cfg.Routing.EvictionInterval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C():
			r.core.Expire(now)
		case <-r.ctx.Done():
			return
		}
	}
}
