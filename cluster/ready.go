package cluster

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// A replica is ready once its registry is the cluster's and the workers in
// it have answered their first health checks. Before, it would route on an
// empty registry, or an old one, and answer a burst of 503s: a replica
// that just joined, or restarted and replays its log, holds inference
// requests until it is ready (the proxy's ready gate) and says 503 on
// /readiness meanwhile. Ready is a latch: a replica that loses its leader
// later goes on routing from local memory.

// readyPoll is how often a starting replica looks whether it caught up.
const readyPoll = 20 * time.Millisecond

// leaderlessGrace is how long a restarted replica that replayed its own log
// waits for a leader before it routes on that log's registry anyway (the
// cluster may have lost its quorum; the registry it had is the best there is).
const leaderlessGrace = 5 * time.Second

// registryFollower hands every registry the replica applies to the parts
// that route on it (the core, the monitor, the proxy's fleet, the KV-event
// hub, the per-worker gauges, the routing config), and holds the ready
// gate, which it opens once the registry is the cluster's.
type registryFollower struct {
	fsm     *store.FSM
	raft    *raftnode.Node
	core    *core.Replica
	monitor *health.Monitor
	kv      *kvHub // nil unless --kv-events
	metrics *metrics.Set
	log     *slog.Logger
	clock   clock.WithTicker
	// probeWait bounds the wait for the workers' first health checks.
	probeWait time.Duration
	// proxy and routing are set once the front end is built, before the
	// follower runs.
	proxy   *proxy.Proxy
	routing *routingFollower

	gauges workerGauges
	loaded atomic.Bool   // the registry is the cluster's: see becomeReady
	ready  chan struct{} // closed when loaded and the workers probed
}

// becomeReady waits until the registry is loaded, then for the first health
// checks of its workers, and opens the ready gate; or until ctx ends.
func (f *registryFollower) becomeReady(ctx context.Context) {
	start := f.clock.Now()
	t := f.clock.NewTicker(readyPoll)
	defer t.Stop()
	for !f.registryIsTheClusters() && !(f.raft.Replayed() && f.clock.Since(start) >= leaderlessGrace) {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
	f.use(f.fsm.View())
	// Engines that dial the tier are taken from now on: they are checked
	// against the registry's workers, which are the cluster's now.
	f.kv.listen()
	f.awaitFirstProbes(ctx)
	f.loaded.Store(true)
	close(f.ready)
	f.log.Info("registry loaded; serving inference", "workers", f.fsm.View().Len(), "took", f.clock.Since(start).Round(time.Millisecond))
}

// awaitFirstProbes waits, at most a health-check timeout and a second, until
// every registered worker has answered its first health check: a worker is
// not eligible before, and a replica that says it is ready should route at
// once.
func (f *registryFollower) awaitFirstProbes(ctx context.Context) {
	reg := f.fsm.View()
	ids := make([]health.WorkerID, 0, reg.Len())
	for _, w := range reg.Workers() {
		ids = append(ids, health.WorkerID(w.ID))
	}
	wait, cancel := context.WithTimeout(ctx, f.probeWait)
	defer cancel()
	if err := f.monitor.AwaitProbed(wait, ids...); err != nil {
		f.log.Warn("not every worker has answered its first health check yet", "err", err)
	}
	f.healthChanged() // publish now what the OnChange delivery would publish a moment later
}

// registryIsTheClusters reports whether this replica applied what the
// cluster committed and the registry has been seeded. A joining follower's
// commit index is at most the last entry it has received: the first
// entries the leader sends make it "caught up" with a commit index the
// leader passed long ago, and its registry then holds no workers yet (the
// flake of "a later replica joins as a non-voter", which was served 503 by
// a replica that opened its gate on an empty registry and probed nobody).
// Every registry of a formed cluster holds the seed, in one entry.
func (f *registryFollower) registryIsTheClusters() bool {
	return f.raft.CaughtUp() && f.fsm.View().Seeded()
}

// follow hands every new registry to the proxy and the monitor, and says
// once when the registry halted (store/halt.go), until ctx ends.
func (f *registryFollower) follow(ctx context.Context) {
	halted := false
	for {
		reg, changed := f.fsm.Watch()
		f.use(reg)
		if err := f.fsm.Halted(); err != nil && !halted {
			halted = true
			f.log.Error("the registry halted: a newer build wrote a log entry this build cannot read; "+
				"it routes on the registry it has until a build that reads it starts on --data-dir", "err", err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (f *registryFollower) use(reg *store.Registry) {
	workers := reg.Workers()
	ids := make([]affinity.WorkerID, 0, len(workers))
	for _, w := range workers {
		ids = append(ids, affinity.WorkerID(w.ID))
	}
	f.core.SetRegistry(ids)
	ws := make([]proxy.Worker, 0, len(workers))
	targets := make([]health.Target, 0, len(workers))
	for _, w := range workers {
		ws = append(ws, proxy.Worker{ID: affinity.WorkerID(w.ID), URL: w.URL, Role: string(w.Role), Model: w.Model,
			BootstrapPort: w.BootstrapPort, Draining: w.State == store.StateDraining})
		targets = append(targets, health.Target{ID: health.WorkerID(w.ID), URL: w.URL, Group: string(w.Role) + "/" + w.Model,
			Model: w.Model})
	}
	if err := f.monitor.SetWorkers(targets); err != nil {
		f.log.Warn("some workers cannot be health-checked", "err", err)
	}
	f.proxy.Fleet().SetWorkers(ws)
	f.kv.sync(workers)
	f.gauges.sync(f.metrics, workers, f.monitor)
	f.routing.follow(reg)
}

// healthChanged tells the core which workers failed their health checks
// (it forgets their prefixes) and republishes the proxy's view. A worker
// not probed yet is not down.
func (f *registryFollower) healthChanged() {
	var down []affinity.WorkerID
	for _, s := range f.monitor.Statuses() {
		if s.Probed && !s.Healthy {
			down = append(down, affinity.WorkerID(s.ID))
		}
	}
	f.core.HealthChanged(down)
	f.proxy.Fleet().Refresh()
}

// peerSilence is how long no load report from any peer means that this
// replica is out of touch with them all: every replica reports every
// loadsync.DefaultLoadInterval (100 ms), so this is twenty missed reports.
// An origin unheard for its TTL (half a second) is dropped, so peerContact.silence,
// which learns of the last report from the origins still listed, must be
// asked more often than that: the health monitor asks every EvalInterval.
const peerSilence = 20 * loadsync.DefaultLoadInterval

// peerContact follows this replica's contact with its peers, from their
// load reports (sync) and the membership (whether there are peers to hear).
type peerContact struct {
	sync    *loadsync.State
	members *membership.Membership
	clock   clock.Clock
	heard   atomic.Int64 // unix nanos of the latest peer report seen
}

// silence is the health monitor's PeerContact: how long this replica
// has been out of touch with every peer (no load report for peerSilence; 0
// while one is heard), and whether it has peers to hear from (a replica it
// saw in the gossip that has not left). A replica that hears neither a peer
// nor a worker is the one cut off, and its failed probes do not count
// against the workers.
func (p *peerContact) silence() (time.Duration, bool) {
	now := p.clock.Now()
	for _, o := range p.sync.Origins(now) {
		if heard := now.Add(-o.Age).UnixNano(); heard > p.heard.Load() {
			p.heard.Store(heard)
		}
	}
	last := p.heard.Load()
	if last == 0 || !p.members.ExpectsPeers() {
		return 0, false
	}
	return max(now.Sub(time.Unix(0, last))-peerSilence, 0), true
}
