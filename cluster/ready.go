package cluster

import (
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
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

// becomeReady waits until the registry is loaded, then for the first health
// checks of its workers, and opens the ready gate.
func (r *Replica) becomeReady() {
	start := r.clock.Now()
	t := r.clock.NewTicker(readyPoll)
	defer t.Stop()
	for !r.registryIsTheClusters() && !(r.raft.Replayed() && r.clock.Since(start) >= leaderlessGrace) {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C():
		}
	}
	r.useRegistry(r.fsm.View())
	// Engines that dial the tier are taken from now on: they are checked
	// against the registry's workers, which are the cluster's now.
	r.kv.listen()
	r.awaitFirstProbes(r.ctx)
	r.loaded.Store(true)
	close(r.ready)
	r.log.Info("registry loaded; serving inference", "workers", r.fsm.View().Len(), "took", r.clock.Since(start).Round(time.Millisecond))
}

// registryIsTheClusters reports whether this replica applied what the
// cluster committed and the registry has been seeded. A joining follower's
// commit index is at most the last entry it has received: the first
// entries the leader sends make it "caught up" with a commit index the
// leader passed long ago, and its registry then holds no workers yet (the
// flake of "a later replica joins as a non-voter", which was served 503 by
// a replica that opened its gate on an empty registry and probed nobody).
// Every registry of a formed cluster holds the seed, in one entry.
func (r *Replica) registryIsTheClusters() bool {
	return r.raft.CaughtUp() && r.fsm.View().Seeded()
}

// peerSilence is how long no load report from any peer means that this
// replica is out of touch with them all: every replica reports every
// loadsync.DefaultLoadInterval (100 ms), so this is twenty missed reports.
// An origin unheard for its TTL (half a second) is dropped, so peerContact,
// which learns of the last report from the origins still listed, must be
// asked more often than that: the health monitor asks every EvalInterval.
const peerSilence = 20 * loadsync.DefaultLoadInterval

// peerContact is the health monitor's PeerContact: how long this replica
// has been out of touch with every peer (no load report for peerSilence; 0
// while one is heard), and whether it has peers to hear from (a replica it
// saw in the gossip that has not left). A replica that hears neither a peer
// nor a worker is the one cut off, and its failed probes do not count
// against the workers.
func (r *Replica) peerContact() (time.Duration, bool) {
	now := r.clock.Now()
	for _, o := range r.sync.Origins(now) {
		if heard := now.Add(-o.Age).UnixNano(); heard > r.peerHeard.Load() {
			r.peerHeard.Store(heard)
		}
	}
	last := r.peerHeard.Load()
	if last == 0 || !r.members.ExpectsPeers() {
		return 0, false
	}
	return max(now.Sub(time.Unix(0, last))-peerSilence, 0), true
}
