package cluster

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// TestAReplicaCutOffFromPeersAndWorkersKeepsItsWorkers: a replica that
// hears none of its peers (its gossip is cut) while every worker fails is
// the one cut off: its failed probes do not take the workers out, its
// readiness says it is cut off, and once a worker answers again it is in
// contact at once. Its peers, which still hear each other, take the failing
// workers out as before.
func TestAReplicaCutOffFromPeersAndWorkersKeepsItsWorkers(t *testing.T) {
	quick := func(cfg *Config) {
		cfg.Health.Interval = 200 * time.Millisecond
		cfg.Health.Timeout = 200 * time.Millisecond
		cfg.Health.FailureThreshold = 2
		cfg.ReapTimeout = time.Hour
		cfg.Health.Endpoint = "/health/" + cfg.NodeName // so that a worker can count each replica's probes
	}
	c := newTestCluster(t, 2)
	c.startN(3, quick)
	c.waitReady()
	cut := c.follower()
	var others []*Replica
	for _, r := range c.replicas {
		if r != cut {
			others = append(others, r)
		}
	}
	reopen := cutGossip(t, cut)
	testwait.Eventually(t, testDeadline, func() bool {
		silent, expected := cut.contact.silence()
		return expected && silent > 0
	}, "the cut replica to hear no peer for a second")
	for _, w := range c.workers {
		w.down.Store(true)
	}
	testwait.Eventually(t, testDeadline, func() bool {
		for _, r := range others {
			for _, w := range r.fsm.View().Workers() {
				if r.monitor.Eligible(healthID(w.ID)) {
					return false
				}
			}
		}
		return true
	}, "the replicas that hear each other to take the failing workers out")
	// Its peers judged; give the cut replica as many rounds again, counted
	// at the workers, and check after each poll that it kept every worker.
	rounds := 2 * cut.cfg.Health.FailureThreshold
	endpoint := cut.cfg.Health.Endpoint
	seen := make(map[*fakeWorker]int, len(c.workers))
	for _, w := range c.workers {
		seen[w] = w.probesAt(endpoint)
	}
	testwait.Eventually(t, testDeadline, func() bool {
		for _, w := range cut.fsm.View().Workers() {
			if !cut.monitor.Eligible(healthID(w.ID)) {
				t.Fatalf("the cut-off replica took worker %d out: its own isolation was counted against the workers", w.ID)
			}
		}
		for _, w := range c.workers {
			if w.probesAt(endpoint) < seen[w]+rounds {
				return false
			}
		}
		return true
	}, "the cut replica probes every worker %d more times", rounds)
	if !cut.monitor.CutOff() {
		t.Fatal("CutOff() = false on a replica that hears no peer and no worker")
	}
	if rep := c.get(cut, "/readiness"); rep.Status != http.StatusServiceUnavailable || !strings.Contains(rep.Body, `"cut_off":true`) {
		t.Fatalf("readiness %d %s, want 503 saying it is cut off", rep.Status, rep.Body)
	}
	for _, w := range c.workers {
		w.down.Store(false)
	}
	reopen()
	testwait.Eventually(t, testDeadline, func() bool { return !cut.monitor.CutOff() }, "the replica back in contact")
	c.waitReady()
}

func healthID(id store.WorkerID) health.WorkerID { return health.WorkerID(id) }
