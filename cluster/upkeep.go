package cluster

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/loadsync"
)

// coreUpkeep runs the loops that keep the routing core current with the
// peers and with time: the count of live replicas, and the ownership
// index's expiry.
type coreUpkeep struct {
	core    *core.Replica
	monitor *health.Monitor
	sync    *loadsync.State
	gossip  *replicaGossip
	clock   clock.WithTicker
}

// countLiveReplicas tells the monitor, every second, how many replicas the
// gossip sees live, so that a peer's verdict takes a worker out only with a
// quorum behind it, and the load table, so that selection counts the peers'
// expected share of a burst (affinity.LoadTable.SetPeerShare).
func (u coreUpkeep) countLiveReplicas(ctx context.Context) {
	t := u.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		live := len(u.gossip.current().Members())
		u.monitor.SetLiveReplicas(live)
		u.core.SetPeers(live-1, u.sync.Config().ReportLag())
		select {
		case <-t.C():
		case <-ctx.Done():
			return
		}
	}
}

// sweepIndex expires idle ownership facts every interval
// (--eviction-interval) when --prefix-ttl is set.
func (u coreUpkeep) sweepIndex(ctx context.Context, interval time.Duration) {
	t := u.clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C():
			u.core.Expire(now)
		case <-ctx.Done():
			return
		}
	}
}
