package fleet

import (
	"testing"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// rolloutGroups is 16 groups of 8 rollouts, each group one task prompt,
// every first turn in one instant: the burst that a tier deciding alone
// places on noisy guesses of each other's choices.
func rolloutGroups(seed int64) (Workload, error) {
	w := workload.DefaultAgenticConfig()
	w.Sessions, w.Turns, w.Seed = 128, 3, seed
	return NewAgenticGroups(w, Groups{Count: 16})
}

// TestMeasureThePlacerOnABurstOfRolloutGroups: 16 workers. Deciding alone,
// 32 replicas leave some workers with two groups and others with none, and
// the tier's throughput falls below one replica's; with the placer every
// cold first turn is placed on one view, and 8 and 32 replicas keep one
// replica's throughput at every seed. At 8 the placer's own share of the
// burst is large enough to show whether it counts the peers' share twice
// (core.PlaceHere).
func TestMeasureThePlacerOnABurstOfRolloutGroups(t *testing.T) {
	const holds, aloneBelow = 0.98, 0.95
	names := []string{"8 with the placer", "32 with the placer", "32 alone"}
	lows := overSeeds(t, measureSeeds(t), names, func(seed int64) ([]float64, error) {
		var thr [4]float64
		for i, cfg := range []Config{
			{Workers: 16, Replicas: 1, Seed: seed},
			{Workers: 16, Replicas: 8, Seed: seed, Placer: true},
			{Workers: 16, Replicas: 32, Seed: seed, Placer: true},
			{Workers: 16, Replicas: 32, Seed: seed},
		} {
			load, err := rolloutGroups(seed)
			if err != nil {
				return nil, err
			}
			res, err := Run(cfg, load)
			if err != nil {
				return nil, err
			}
			thr[i] = res.ThroughputRPS
		}
		t.Logf("seed %d: throughput 1 replica %.2f, 8 with the placer %.2f, 32 with it %.2f, 32 alone %.2f", seed, thr[0], thr[1], thr[2], thr[3])
		return []float64{thr[1] / thr[0], thr[2] / thr[0], thr[3] / thr[0]}, nil
	})
	for i, replicas := range []int{8, 32} {
		if lows[i] < holds {
			t.Errorf("with the placer %d replicas keep %.3f of one replica's throughput at the worst seed, want >= %.2f", replicas, lows[i], holds)
		}
	}
	if lows[2] >= aloneBelow {
		t.Errorf("alone 32 replicas keep %.3f of one replica's throughput at the worst seed: the burst shows nothing", lows[2])
	}
}
