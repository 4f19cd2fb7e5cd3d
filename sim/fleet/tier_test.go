package fleet

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// tierSessions is a small agentic scenario with the shape that broke the
// tier: every session's first turn at once, all sharing a system prompt,
// and conversations that outgrow the workers' caches, so that a replica's
// index must forget about when the engines do.
func tierSessions() workload.AgenticConfig {
	return workload.AgenticConfig{
		Sessions: 96, Turns: 10, SystemPromptTokens: 1024, TaskTokens: 512,
		ObservationTokens: 512, AnswerTokens: 32, ThinkTime: 500 * time.Millisecond, Seed: 5,
	}
}

func tierFleet(replicas int) Config {
	return Config{
		Workers: 8, Replicas: replicas, Sync: SyncGossip, Policy: affinity.PolicyCacheAware, Seed: 1,
		Thresholds: affinity.Thresholds{CacheThreshold: 0.3, BalanceAbs: 16, BalanceRel: 1.5},
		Engine:     sim.Config{KVCapacityTokens: 1 << 16},
	}
}

// TestEightGossipingReplicasKeepOneReplicasHitRate is the tier's promise on
// agentic sessions: 8 replicas that gossip keep at least 0.95 of the hit
// rate of one replica.
func TestEightGossipingReplicasKeepOneReplicasHitRate(t *testing.T) {
	one := run(t, tierFleet(1), tierSessions())
	eight := run(t, tierFleet(8), tierSessions())
	t.Logf("hit rate: 1 replica %.4f, 8 replicas %.4f (%.3f); lost %+v, false hits %d",
		one.HitRate, eight.HitRate, eight.HitRate/one.HitRate, eight.Lost, eight.FalseHits)
	if eight.HitRate < 0.95*one.HitRate {
		t.Errorf("8 replicas hit %.4f, one replica %.4f: want at least 0.95 of it (lost %+v)",
			eight.HitRate, one.HitRate, eight.Lost)
	}
}
