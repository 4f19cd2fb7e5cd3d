package fleet

import (
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/virtualclock"
)

// TestGossipedDecisionChargesItsWholeChain pins the wiring from one
// replica's routing decision to a peer's index: the peer learns a few
// sparse facts, yet its budget for the worker is charged the chain's length,
// as the engine's cache is.
func TestGossipedDecisionChargesItsWholeChain(t *testing.T) {
	cfg := smallFleet(affinity.PolicyCacheAware, 2, SyncGossip).withDefaults()
	clock := virtualclock.New(epoch)
	var replicas [2]*replica
	for n := range replicas {
		r, err := newReplica(cfg, n, newState(cfg, clock), clock, seeded(cfg.Seed, streamPolicies+uint64(n)))
		if err != nil {
			t.Fatal(err)
		}
		replicas[n] = r
	}
	const blocks = 100
	hashes := make([]uint64, blocks)
	for i := range hashes {
		hashes[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	a, b := replicas[0], replicas[1]
	a.gossip.Owned(hashes, 3)
	for _, p := range a.gossip.Tick(clock.Now()) {
		if err := b.gossip.Receive(p, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if learned := b.gossip.Stats().FactsLearned; learned >= blocks/10 {
		t.Fatalf("the peer learned %d facts: not the sparse digest this test is about", learned)
	}
	if n := b.index.Blocks(3); n != blocks {
		t.Fatalf("the peer charged worker 3 with %d blocks, want the chain's %d", n, blocks)
	}
}
