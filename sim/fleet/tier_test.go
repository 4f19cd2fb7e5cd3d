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

// TestMeasureEightGossipingReplicasAgainstOne measures the tier's promise
// on agentic sessions: the hit rate 8 gossiping replicas keep of one
// replica's. The target is 0.95; over 8 seed pairs the ratio ranges from
// 0.973 (seed 3) to 1.012 (0.936 to 1.003 while each replica calibrated
// its index budgets from its own answers only, 0.926 to 1.019 before the
// answers calibrated them at all), so what is asserted is the minimum that
// holds, 0.965; the logged attribution says what the rest is made of.
func TestMeasureEightGossipingReplicasAgainstOne(t *testing.T) {
	const target, holds = 0.95, 0.965
	lows := overSeeds(t, measureSeeds(t), []string{"8 replicas' hit rate / one's"}, func(seed int64) ([]float64, error) {
		w := tierSessions()
		w.Seed += seed - 1
		one, eight := tierFleet(1), tierFleet(8)
		one.Seed, eight.Seed = seed, seed
		r1, err := runE(one, w)
		if err != nil {
			return nil, err
		}
		r8, err := runE(eight, w)
		if err != nil {
			return nil, err
		}
		t.Logf("seed %d: hit rate 1 replica %.4f, 8 replicas %.4f; judged by the engines, 1: %+v, 8: %+v",
			seed, r1.HitRate, r8.HitRate, r1.Judged, r8.Judged)
		return []float64{r8.HitRate / r1.HitRate}, nil
	})
	if lows[0] < holds {
		t.Errorf("8 replicas keep %.4f of one replica's hit rate at the worst seed: want at least %.2f (target %.2f)",
			lows[0], holds, target)
	}
	if lows[0] < target {
		t.Logf("below the target of %.2f at the worst seed: %.4f", target, lows[0])
	}
}
