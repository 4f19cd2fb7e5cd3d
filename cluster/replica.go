package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
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
	// gossip is the memberlist side (gossip.go).
	gossip   *replicaGossip
	members  *membership.Membership
	writes   *raftnode.Forwarder
	rpc      *link.Client // to the peers' cluster ports
	keyrings keyringFanout
	placer   *placing    // nil with --placer=false
	tokens   *tokenShare // nil unless the proxy tokenizes (--kv-events)
	reloads  reloaders

	// routing builds the routers and follows the registry's routing
	// config (routing.go).
	routing *routingFollower
	// admission bridges the door, the monitor and the gossip (admission.go).
	admission *admissionBridge
	// views answer the admin API's reads (status.go, workerstats.go,
	// history.go).
	views *adminViews
	// registry hands each registry to the parts and holds the ready gate
	// (ready.go).
	registry *registryFollower
	// contact is this replica's contact with its peers, for the monitor
	// (ready.go).
	contact *peerContact
	// lora is the adapters' residency, nil with --lora-residency=false.
	lora *loraResidency

	// bound are the listeners bound at start (listeners.go).
	bound   listeners
	apiAddr string // where peers reach the API listener

	serving bool // the proxy took over the API listener; Stop shuts it down
	failed  chan error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
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
		history: newSampleRing(int(historySpan / historyEvery))}
	r.clock = cfg.Clock
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.gossip = &replicaGossip{cfg: cfg, log: r.log, clock: r.clock}
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
	r.goRun(func() { r.registry.becomeReady(r.ctx) })
	if r.bootstrapsAlone() {
		// A lone replica is ready at once: let Start return when it is.
		select {
		case <-r.registry.ready:
		case <-ctx.Done():
		}
	}
	return r, nil
}

// build creates the parts, leaves first, and joins the gossip last. The
// listeners come first of all, so that a port in use is refused at once.
func (r *Replica) build() error {
	cfg := r.cfg
	if err := r.bound.open(cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := r.openRaft(); err != nil {
		return err
	}
	cfg.warnIfInsecure(r.log)
	var err error
	// One dialer for every connection to a worker, health's and the proxy's.
	r.dialer = &workerurl.Dialer{Policy: cfg.Proxy.WorkerHosts}
	hcfg := cfg.Health
	hcfg.Dialer = r.dialer
	r.monitor, err = health.New(hcfg, nil, r.log)
	if err != nil {
		return err
	}
	r.apiAddr = advertisedAPIAddr(r.bound.api.Addr(), r.raft.Addr())
	r.gossip.raftAddr, r.gossip.apiAddr = r.raft.Addr(), r.apiAddr
	r.admission = &admissionBridge{engines: r.monitor.Engines()}
	if err := r.newCore(); err != nil {
		return err
	}
	r.registry = &registryFollower{fsm: r.fsm, raft: r.raft, core: r.core, monitor: r.monitor, kv: r.kv,
		metrics: r.metrics, log: r.log, clock: r.clock, probeWait: cfg.Health.Timeout + time.Second,
		ready: make(chan struct{})}
	if err := r.buildFrontEnd(); err != nil {
		return err
	}
	r.monitor.OnChange(r.registry.healthChanged)
	r.contact = &peerContact{sync: r.sync, members: r.members, clock: r.clock}
	r.monitor.SetPeerContact(r.contact.silence)
	clusterFamilies{ctx: r.ctx, raft: r.raft, fsm: r.fsm, monitor: r.monitor, sync: r.sync, core: r.core, index: r.index,
		gossip: r.gossip.current, loaded: r.registry.loaded.Load}.register(r.metrics)
	r.lora = newLoRAResidency(cfg.LoRA.Residency, r.core, r.monitor.Engines(), r.fsm, r.clock)
	if r.lora != nil {
		r.lora.register(r.metrics)
	}
	return r.gossip.start(r.ctx, r.sync, r.members.MemberChanged, gossipChannels(r.kv, r.core))
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
	r.members = newMembership(cfg, r.clock, r.log, r.raft,
		gossipMembers{gossip: r.gossip, sync: func() *loadsync.State { return r.sync }}, len(servers) > 0)
	r.rpc = link.NewClient(r.raft.Port(), rpcTimeout)
	r.keyrings = keyringFanout{node: cfg.NodeName, gossip: r.gossip.current, rpc: r.rpc, log: r.log}
	r.writes = raftnode.NewForwarder(r.raft, r.rpc)
	if t := r.raft.Port().TLS(); t != nil {
		r.reloads.add("cluster TLS", t.Reload)
	}
	return nil
}

// bootstrapsAlone says whether this replica forms a one-node cluster.
func (r *Replica) bootstrapsAlone() bool { return len(r.cfg.Join) == 0 && r.cfg.BootstrapExpect == 1 }

// buildFrontEnd creates the routers, the admin API and the proxy.
func (r *Replica) buildFrontEnd() error {
	cfg := r.cfg
	r.routing = &routingFollower{flags: cfg.Routing, core: r.core, fsm: r.fsm, apply: r.writes.Apply, log: r.log}
	router, err := r.routing.newRouter(cfg.Routing.Policy, cfg.Routing.Thresholds, cfg.Routing.MissPlacement)
	if err != nil {
		return err
	}
	pd, err := r.routing.disaggregationOf(cfg.Routing)
	if err != nil {
		return err
	}
	r.views = &adminViews{ctx: r.ctx, node: cfg.NodeName, raft: r.raft, fsm: r.fsm, gossip: r.gossip.current, members: r.members,
		sync: r.sync, loads: r.loads, monitor: r.monitor, clock: r.clock, history: r.history, kv: r.kv}
	r.admin = admin.New(admin.Config{Token: cfg.AdminToken, Registry: r.fsm.View, Apply: r.writes.Apply,
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
	var tokens proxy.TokenShare
	if pcfg.Tokenize.Enabled && !pcfg.Tokenize.Alone {
		r.tokens = &tokenShare{gossip: r.gossip, rpc: link.NewQuick(r.raft.Port())}
		tokens = r.tokens
	}
	r.proxy, err = proxy.New(pcfg, proxy.Deps{Loads: r.loads, Index: r.index, Router: router,
		Health: healthGate{r.monitor}, Metrics: r.metrics, Logger: r.log, Admin: r.admin.Serve,
		RegistryLoaded: r.registry.loaded.Load, Ready: r.registry.ready, PD: pd, Tracer: cfg.Tracer, AdminToken: r.admin,
		Dialer: r.dialer, Decider: decider, Engines: r.admission.engineReadings, OwnerSecrets: r.gossip.ownerSecrets,
		Tokens: tokens})
	r.routing.proxy = r.proxy
	r.registry.proxy, r.registry.routing = r.proxy, r.routing
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
	if r.bound.metrics != nil {
		r.goRun(func() { serveMetrics(r.ctx, r.bound.metrics, r.metrics) })
	}
	r.goRun(func() { serveRPC(r.ctx, r.raft.Port(), r.rpcRoutes()) })
	if r.bound.debug != nil {
		r.goRun(func() { serveDebug(r.ctx, r.bound.debug) })
	}
	r.goRun(func() { r.registry.follow(r.ctx) })
	r.goRun(func() { _ = r.monitor.Run(r.ctx) })
	upkeep := coreUpkeep{core: r.core, monitor: r.monitor, sync: r.sync, gossip: r.gossip, clock: r.clock}
	r.goRun(func() { upkeep.countLiveReplicas(r.ctx) })
	r.goRun(func() { upkeep.sweepIndex(r.ctx, r.cfg.Routing.EvictionInterval) })
	if r.kv != nil {
		r.goRun(func() { r.kv.followEngines(r.ctx, r.clock, r.monitor.Engines()) })
	}
	if r.lora != nil {
		r.goRun(func() { r.lora.feed(r.ctx) })
	}
	r.goRun(func() { r.members.Run(r.ctx) })
	r.goRun(func() { r.members.RunRejoin(r.ctx, r.gossip.addr) })
	r.goRun(r.views.recordHistory)
}

// serveAPI serves the HTTP API until Stop. A listener that fails for good
// (the accept loop retries what passes, such as running out of
// descriptors) fails the replica: its owner should exit, so that the load
// balancer stops sending to an API that no longer answers.
func (r *Replica) serveAPI() {
	err := r.proxy.Serve(r.bound.api)
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
func (r *Replica) HTTPAddr() string { return r.bound.api.Addr().String() }

// DebugAddr is where the profiles are served, "" when --debug-addr is off.
func (r *Replica) DebugAddr() string { return r.bound.debugAddr() }

// GossipAddr is the memberlist address other replicas --join.
func (r *Replica) GossipAddr() string { return r.gossip.addr }

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
		_ = r.bound.api.Close()
	}
	r.wg.Wait()
	if r.gossip.current() != nil {
		errs = append(errs, r.gossip.stop(leave, r.members.Joined()))
	}
	r.kv.close()
	errs = append(errs, r.closeParts())
	return errors.Join(errs...)
}

// closeParts closes what build opened and serve did not take over.
func (r *Replica) closeParts() error {
	var errs []error
	if !r.serving {
		errs = append(errs, r.bound.close()...)
	}
	if r.rpc != nil {
		r.rpc.Close()
	}
	if r.placer != nil {
		r.placer.rpc.Close()
	}
	if r.tokens != nil {
		r.tokens.rpc.Close()
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
	s := &seeder{raft: r.raft, fsm: r.fsm, routing: r.routing, apply: r.writes.Apply, seeds: r.cfg.Seeds,
		log: r.log, clock: r.clock}
	if r.bootstrapsAlone() {
		return s.now(ctx, seedTimeout)
	}
	r.goRun(func() { s.retry(r.ctx) })
	return nil
}
