package cluster

import (
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/loadsync"
)

// forger is a stranger on a cluster without a gossip key: a real
// memberlist node speaking loadsync, sending what it likes.
type forger struct {
	st *loadsync.State
	g  *loadsync.Gossip
}

func startForger(t *testing.T, victim *Replica, loads []loadsync.WorkerLoad, verdicts []loadsync.Verdict) *forger {
	t.Helper()
	st, err := loadsync.New(loadsync.Config{
		Origin:        "forger",
		BootEpoch:     uint64(time.Now().UnixNano()),
		ClusterConfig: victim.cfg.Routing.clusterConfig(), // what any peer's metadata shows
		LocalLoads:    func(dst []loadsync.WorkerLoad) []loadsync.WorkerLoad { return append(dst, loads...) },
		LocalVerdicts: func(dst []loadsync.Verdict) []loadsync.Verdict { return append(dst, verdicts...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadsync.Start(loadsync.GossipConfig{BindAddr: "127.0.0.1:0", LocalNetwork: true}, st, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Kill() })
	if err := g.Join([]string{victim.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	return &forger{st: st, g: g}
}

// TestForgedGossipChangesNoMemoryRoutingOrEligibility floods a replica
// with what a stranger can gossip where there is no key: loads for 4,000
// made-up workers, ownership facts for made-up workers and facts of a
// huge span for a real one, wedge verdicts on every real worker from one
// origin. The load table and the index keep only the registry's workers,
// the real worker's prefixes survive, routing follows them, and every
// worker stays eligible.
func TestForgedGossipChangesNoMemoryRoutingOrEligibility(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(1)
	c.waitReady()
	r := c.replicas["r0"]
	p := prompt("affinity", 4)
	c.complete(r, p)
	owner := c.workerID(r, c.complete(r, p))
	other := c.workerID(r, "w1")
	if other == owner {
		other = c.workerID(r, "w2")
	}
	if !knowsPrefix(r, p, owner) {
		t.Fatal("the owner's prefix is not in the index before the flood")
	}
	ownerBlocks := r.index.Blocks(owner)

	var loads []loadsync.WorkerLoad
	for id := range uint32(4000) {
		loads = append(loads, loadsync.WorkerLoad{Worker: 1000 + id, InFlight: 7})
	}
	verdicts := []loadsync.Verdict{
		{Worker: uint32(owner), Kind: uint8(health.VerdictWedged), Since: time.Now().UnixNano()},
		{Worker: uint32(other), Kind: uint8(health.VerdictWedged), Since: time.Now().UnixNano()},
	}
	f := startForger(t, r, loads, verdicts)
	chain := make([]uint64, 1<<18) // a fact whose span is 2^17 blocks, more than any request hashes
	for i := range chain {
		chain[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	f.st.Owned(chain, uint32(owner))
	for id := range uint32(500) {
		f.st.Owned([]uint64{uint64(id) + 7}, 1000+id)
	}
	// A marker the victim accepts: a normal fact for the other real worker,
	// sent after the flood.
	marker := prompt("marker", 2)
	f.st.Owned(affinity.BlockHashes(nil, "m", []byte(marker), r.cfg.Routing.BlockSize), uint32(other))

	testwait.Eventually(t, testDeadline, func() bool {
		heard := false
		for _, o := range r.sync.Origins(time.Now()) {
			heard = heard || o.Origin == "forger" && o.Seq > 1
		}
		return heard && knowsPrefix(r, marker, other)
	}, "the forger's load reports and marker fact to arrive")
	testwait.Eventually(t, testDeadline, func() bool {
		for _, o := range r.monitor.RemoteOrigins() {
			if o == "forger" {
				return true
			}
		}
		return false
	}, "the forger's verdicts to arrive")

	if n := r.sync.Remote(1000); n != 0 {
		t.Errorf("the gossip holds %d in flight for a made-up worker, want it dropped as it arrived", n)
	}
	if n := r.loads.Len(); n != 2 {
		t.Errorf("load table holds %d workers after the flood, want the registry's 2", n)
	}
	if n := r.index.Workers(); n != 2 {
		t.Errorf("index keeps blocks for %d workers after the flood, want the registry's 2", n)
	}
	// Its checkpoints at powers of two span 1, 1, 2, ... 2^16 and the deepest
	// 2^17 blocks: capped, they add up to 4 MaxChainBlocks, not 2^18.
	if got := r.index.Blocks(owner) - ownerBlocks; got > 4*affinity.MaxChainBlocks {
		t.Errorf("the forged chain of %d blocks was charged %d blocks, more than its facts' capped spans allow", len(chain), got)
	}
	if !knowsPrefix(r, p, owner) {
		t.Error("the forged fact of a huge span wiped the owner's prefixes")
	}
	for _, w := range []affinity.WorkerID{owner, other} {
		if !r.monitor.Eligible(health.WorkerID(w)) {
			t.Errorf("worker %d was taken out by one origin's verdict", w)
		}
	}
	if got := c.workerID(r, c.complete(r, p)); got != owner {
		t.Errorf("the prompt went to worker %d after the flood, want its owner %d", got, owner)
	}
}
