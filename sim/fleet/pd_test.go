package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// collapsingSplitFleet is the seed's shape scaled down: 4 prefill and 6
// decode workers, one prefill worker four times slower, with a balance
// threshold scaled to the few requests each prefill worker holds, so that
// the fleet gate finds the fleet imbalanced as the seed's did.
func collapsingSplitFleet(policy string) Config {
	return Config{
		Prefill: 4, Decode: 6, Policy: policy, Seed: 1,
		Thresholds: affinity.Thresholds{CacheThreshold: 0.3, BalanceAbs: 8, BalanceRel: 1.5},
		Engine:     sim.Config{KVCapacityTokens: 1 << 20},
		Slowdown:   map[affinity.WorkerID]float64{1: 4},
	}
}

// collapsingRollouts are 96 rollouts in 12 unequal groups, each group
// sharing a task prompt, prefill-bound: a turn adds 1024 tokens of
// observation and decodes 32.
func collapsingRollouts(t *testing.T) (*Agentic, int) {
	t.Helper()
	a, sessions, err := collapsingRolloutsSeeded(3)
	if err != nil {
		t.Fatal(err)
	}
	return a, sessions
}

// collapsingRolloutsSeeded is collapsingRollouts drawn with seed.
func collapsingRolloutsSeeded(seed int64) (*Agentic, int, error) {
	cfg := workload.AgenticConfig{
		Sessions: 96, Turns: 6, SystemPromptTokens: 2048, TaskTokens: 64,
		ObservationTokens: 1024, AnswerTokens: 32, ThinkTime: 500 * time.Millisecond, Seed: seed,
	}
	a, err := NewAgenticGroups(cfg, Groups{Count: 12, ObservationSpread: 1})
	return a, cfg.Sessions, err
}

func runRollouts(t *testing.T, policy string) Result {
	t.Helper()
	load, sessions := collapsingRollouts(t)
	res, err := Run(collapsingSplitFleet(policy), load)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	if res.Rollouts != sessions {
		t.Fatalf("%s: %d rollouts finished, want %d", policy, res.Rollouts, sessions)
	}
	return res
}

// TestMeasurePerRequestAffinityAgainstTheFleetGateOnASplitFleet measures
// cache_aware's lead over cache_aware_fleet_gate on a collapsing split
// fleet. The lead was pinned at 0.05 on one seed pair (0.120); over 8 it
// ranges from 0.046 to 0.120, so 0.04 is asserted, and fewer prompt tokens
// computed per rollout at every seed.
func TestMeasurePerRequestAffinityAgainstTheFleetGateOnASplitFleet(t *testing.T) {
	lows := overSeeds(t, measureSeeds(t), []string{"prefill hit rate lead", "gate's prompt tokens per rollout / cache_aware's"},
		func(seed int64) ([]float64, error) {
			var res [2]Result
			for i, policy := range []string{affinity.PolicyFleetGate, affinity.PolicyCacheAware} {
				cfg := collapsingSplitFleet(policy)
				cfg.Seed = seed
				load, sessions, err := collapsingRolloutsSeeded(2 + seed)
				if err != nil {
					return nil, err
				}
				if res[i], err = Run(cfg, load); err != nil {
					return nil, err
				}
				if res[i].Rollouts != sessions {
					return nil, fmt.Errorf("%s: %d rollouts finished, want %d", policy, res[i].Rollouts, sessions)
				}
			}
			gate, perRequest := res[0], res[1]
			return []float64{perRequest.HitRate - gate.HitRate, gate.PromptTokensPerRollout / perRequest.PromptTokensPerRollout}, nil
		})
	// 0.046 at the worst seed before equal loads were broken by the
	// request rather than the pool's order, which moved both policies;
	// the mean rose (0.071 to 0.081) and the worst seed fell to 0.030.
	if lows[0] < 0.029 {
		t.Errorf("prefill hit rate: cache_aware's lead over cache_aware_fleet_gate min %.3f, want 0.029", lows[0])
	}
	if lows[1] <= 1 {
		t.Errorf("prompt tokens per rollout: the gate computed %.3f of cache_aware's at some seed: want more at every seed", lows[1])
	}
}

func TestRolloutFiguresAddUp(t *testing.T) {
	res := runRollouts(t, affinity.PolicyCacheAware)
	if res.PrefillQueueMax == 0 || res.PrefillQueueMean <= 0 || res.PrefillQueueMean > float64(res.PrefillQueueMax) {
		t.Errorf("prefill queue mean %.1f, max %d: want a queue, its mean within its max", res.PrefillQueueMean, res.PrefillQueueMax)
	}
	if res.PrefillQueueMax > 96 {
		t.Errorf("prefill queue max %d with 96 rollouts, each one request at a time", res.PrefillQueueMax)
	}
	if want := float64(res.Rollouts) / (res.MakespanSeconds / 60); res.RolloutsPerMin != want {
		t.Errorf("rollouts per minute %.2f, want %d rollouts over %.1fs = %.2f", res.RolloutsPerMin, res.Rollouts, res.MakespanSeconds, want)
	}
	// The decode workers are handed every prompt's KV: they compute
	// nothing, so the prefill workers' compute is the fleet's.
	if got := res.PromptTokensPerRollout * float64(res.Rollouts); uint64(got+0.5) != res.PrefillTokens {
		t.Errorf("prompt tokens per rollout x rollouts = %.0f, want the prefill tokens %d", got, res.PrefillTokens)
	}
}

func TestATraceHasNoRollouts(t *testing.T) {
	res, err := Run(Config{Workers: 2, Seed: 1}, NewTrace([]workload.TraceRecord{{InputLength: 100, OutputLength: 4, HashIDs: []int64{1, 2, 3, 4, 5, 6, 7}}, {Timestamp: 10 * time.Millisecond, InputLength: 100, OutputLength: 4, HashIDs: []int64{1, 2, 3, 4, 5, 6, 8}}}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 0 || res.PromptTokensPerRollout != 0 || res.RolloutsPerMin != 0 {
		t.Errorf("a trace of open-loop requests: %d rollouts, %.0f tokens per rollout, %.2f per minute: want none",
			res.Rollouts, res.PromptTokensPerRollout, res.RolloutsPerMin)
	}
}
