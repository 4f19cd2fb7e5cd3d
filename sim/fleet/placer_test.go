package fleet

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sim"
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

// placerFleet is 8 workers whose caches evict behind 4 replicas with the
// placer, a share loss of whose answers is lost, asked within timeout (0:
// the router's).
func placerFleet(loss float64, timeout time.Duration) Config {
	return Config{Workers: 8, Replicas: 4, Seed: 1, Placer: true, PlacerAnswerLoss: loss, PlacerTimeout: timeout,
		Engine: sim.Config{KVCapacityTokens: 1 << 16}}
}

// TestALostAnswersRequestIsDecidedAloneAtItsDeadline: 64 new sessions
// through 4 replicas whose placer's answers are lost half the time, with a
// placer timeout of a second. Every request is still served, each whose
// answer was lost decided alone at its deadline, a second of virtual time
// after it asked: the slowest 1% of first tokens take that long, against a
// fraction of it with every answer, when nothing is decided alone. The run
// repeats exactly.
func TestALostAnswersRequestIsDecidedAloneAtItsDeadline(t *testing.T) {
	w := claimAgentic()
	w.Sessions, w.Turns, w.Seed = 64, 6, 1
	clean := run(t, placerFleet(0, time.Second), w)
	lossy, again := run(t, placerFleet(0.5, time.Second), w), run(t, placerFleet(0.5, time.Second), w)
	t.Logf("%d answers lost, %d decided alone, TTFT p99 %.0f ms (%.0f ms with every answer)", lossy.PlacerAnswersLost,
		lossy.PlacedAlone, lossy.TTFTP99Ms, clean.TTFTP99Ms)
	if clean.PlacedAlone != 0 || clean.PlacerAnswersLost != 0 || clean.TTFTP99Ms >= 1000 {
		t.Fatalf("every answer: %d decided alone, %d lost, TTFT p99 %.0f ms; want none, none, under the timeout",
			clean.PlacedAlone, clean.PlacerAnswersLost, clean.TTFTP99Ms)
	}
	if lossy.Errors != 0 || lossy.PlacerAnswersLost == 0 || lossy.PlacedAlone < lossy.PlacerAnswersLost {
		t.Fatalf("%d errors, %d answers lost, %d decided alone: want none, some, one at least for each lost",
			lossy.Errors, lossy.PlacerAnswersLost, lossy.PlacedAlone)
	}
	if lossy.TTFTP99Ms < 1000 {
		t.Errorf("TTFT p99 %.0f ms: a request whose answer was lost did not wait for its deadline", lossy.TTFTP99Ms)
	}
	if !reflect.DeepEqual(lossy, again) {
		t.Errorf("the same run twice differs:\n%+v\n%+v", lossy, again)
	}
}

// TestAnAskerLeavesAPlacerThatLostItsAnswerQuiet: agentic sessions whose
// caches evict, so that cold requests come all along, through 4 replicas
// whose placer's answers are lost half the time. After a lost answer an
// asker decides its cold requests alone for core.PlacerQuiet without
// asking, so more are decided alone than answers were lost.
func TestAnAskerLeavesAPlacerThatLostItsAnswerQuiet(t *testing.T) {
	w := claimAgentic()
	w.Seed = 1
	r := run(t, placerFleet(0.5, 0), w)
	t.Logf("%d answers lost, %d decided alone", r.PlacerAnswersLost, r.PlacedAlone)
	if r.Errors != 0 || r.PlacerAnswersLost == 0 || r.PlacedAlone <= r.PlacerAnswersLost {
		t.Errorf("%d errors, %d answers lost, %d decided alone: want none, some, and more alone than lost",
			r.Errors, r.PlacerAnswersLost, r.PlacedAlone)
	}
}
