package fleet

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// The tier's claims at 8, 32 and 64 gossiping replicas against one, on
// three workloads, at seed pairs 1-8 (fleet seed s; the agentic draws move
// with it): what BENCHMARKS.md's table of fleetsim claims says. Minutes of
// simulation, so they run only under FLEETSIM_CLAIMS=1:
//
//	FLEETSIM_CLAIMS=1 go test -count=1 -v -run TestMeasureTheTierAgainstOneReplica ./sim/fleet/
//
// The tiers run with the placer (Config.Placer), as the router does by
// default; FLEETSIM_PLACER=0 runs them deciding alone and asserts nothing
// (the floors are the placer's). Every replica, one replica's too, runs
// the router's admission door (Config.Door), as the router does by
// default; FLEETSIM_DOOR=0 runs without it, and asserts the same floors.
//
// The targets (issue 18): the minimum over the seeds of the hit rate >=
// 0.98 of one replica's, TTFT p50 and p99 <= 1.1x, throughput >= 0.95x.
// What is asserted is what holds (claimCase's floors); each figure below
// its target is logged with the target, and the table says which
// mechanism the attribution names for it.

// claimReplicas are the tier sizes measured against one replica.
var claimReplicas = []int{8, 32, 64}

// claimCase is one workload of the claims, with the floors its minimum over
// the seeds holds at each tier size (in claimReplicas' order).
type claimCase struct {
	name   string
	fleet  func(replicas int, seed int64) Config
	load   func(seed int64) (Workload, error)
	hitLow []float64 // hit rate / one replica's, minimum over the seeds
	thrLow []float64 // throughput / one replica's, minimum
	// jittered, where set, is the workload at seed with every arrival moved
	// later by up to a millisecond (less than any network between a client
	// and a router adds): one replica on it against one replica on load is
	// how far the workload alone moves a figure, the spread a tier's ratio
	// is read against.
	jittered func(seed int64) (Workload, error)
}

// claimAgentic is the real-process sweep's configuration (scripts/realtier.py):
// 8 workers whose caches evict, 128 sessions of 10 turns sharing a system
// prompt, 0.3 s between turns.
func claimAgentic() workload.AgenticConfig {
	return workload.AgenticConfig{Sessions: 128, Turns: 10, SystemPromptTokens: 2048, TaskTokens: 512,
		ObservationTokens: 512, AnswerTokens: 32, ThinkTime: 300 * time.Millisecond}
}

var claimCases = []claimCase{
	{
		name: "agentic sessions, 8 workers",
		fleet: func(n int, seed int64) Config {
			return Config{Workers: 8, Replicas: n, Seed: seed, Engine: sim.Config{KVCapacityTokens: 1 << 16}}
		},
		load: func(seed int64) (Workload, error) {
			w := claimAgentic()
			w.Seed = seed
			return NewAgentic(w), nil
		},
		// With every replica's door the worst seeds give 0.971 / 0.983 /
		// 0.978 of one replica's throughput at 8 / 32 / 64 replicas
		// (without doors 0.980 / 0.986 / 0.978; misses placed by count
		// 0.974 / 0.980 / 0.964); the target is 0.95.
		hitLow: []float64{0.98, 0.98, 0.98}, thrLow: []float64{0.96, 0.96, 0.95},
	},
	{
		name:  "RL rollouts, 16 groups, 16 workers",
		fleet: func(n int, seed int64) Config { return Config{Workers: 16, Replicas: n, Seed: seed} },
		load: func(seed int64) (Workload, error) {
			w := workload.DefaultAgenticConfig()
			w.Sessions, w.Turns, w.Seed = 128, 10, seed
			return NewAgenticGroups(w, Groups{Count: 16})
		},
		hitLow: []float64{0.99, 0.99, 0.99}, thrLow: []float64{0.98, 0.98, 0.98},
	},
	{
		name:  "the conversation trace, first 1000 records, 16 workers",
		fleet: func(n int, seed int64) Config { return Config{Workers: 16, Replicas: n, Seed: seed} },
		load:  func(int64) (Workload, error) { return claimTraceLoad(0, 0) },
		// One replica against itself, its arrivals moved by up to 1 ms,
		// gives 0.905-1.047 of its own hit rate here (1.010-1.043 with
		// misses placed by prefill backlog); with them the tiers give
		// 0.921-1.083 (mean 1.019), 0.972-1.062 and 0.977-1.073 at 8, 32
		// and 64 replicas.
		hitLow: []float64{0.92, 0.95, 0.95}, thrLow: []float64{0.98, 0.98, 0.98},
		jittered: func(seed int64) (Workload, error) {
			return claimTraceLoad(0, seed)
		},
	},
	{
		// The trace stamps its requests in 3 s steps: as recorded (above),
		// every request of a step arrives in one instant, before any
		// replica can hear of another's choices; here each arrives at a
		// random time within its step, different arrivals at each seed.
		name:  "the conversation trace, first 1000 records spread over their 3 s steps, 16 workers",
		fleet: func(n int, seed int64) Config { return Config{Workers: 16, Replicas: n, Seed: seed} },
		load:  func(seed int64) (Workload, error) { return claimTraceLoad(seed, 0) },
		// The spread trace's worst seeds move most with where a new
		// conversation starts (with misses placed by prefill backlog, 8
		// replicas 0.920-1.102, mean 1.015; 32 replicas 0.918-1.082, mean
		// 1.020; 64 replicas 0.882-1.075, mean 1.014): one replica's own
		// hit rate ranges 0.138-0.159 over the seeds' spreads, the tiers'
		// 0.140-0.158 at 64 replicas, and the worst ratio pairs the
		// tier's lowest with one replica's highest (seed 2).
		hitLow: []float64{0.90, 0.91, 0.88}, thrLow: []float64{0.98, 0.98, 0.98},
		jittered: func(seed int64) (Workload, error) {
			return claimTraceLoad(seed, seed)
		},
	},
}

// claimTraceLoad is the first 1000 records of the trace, each arrival moved
// later by up to 3 s when spreadSeed is set (drawn from it), then by up to
// 1 ms when jitterSeed is set.
func claimTraceLoad(spreadSeed, jitterSeed int64) (Workload, error) {
	recs, err := claimTrace()
	if err != nil {
		return nil, err
	}
	if spreadSeed != 0 {
		recs = workload.SpreadArrivals(recs, 3*time.Second, uint64(spreadSeed))
	}
	if jitterSeed != 0 {
		// Another stream than the spread's at the same seed.
		recs = workload.SpreadArrivals(recs, time.Millisecond, uint64(jitterSeed)+1<<32)
	}
	return NewTrace(recs, 1), nil
}

// claimsAlone reports whether the tiers decide alone (FLEETSIM_PLACER=0).
func claimsAlone() bool { return os.Getenv("FLEETSIM_PLACER") == "0" }

// claimFleet is c's fleet of replicas at seed, with the door unless
// FLEETSIM_DOOR=0.
func claimFleet(c claimCase, replicas int, seed int64) Config {
	cfg := c.fleet(replicas, seed)
	cfg.Door = os.Getenv("FLEETSIM_DOOR") != "0"
	return cfg
}

// claimTrace reads the first 1000 records of the shared conversation trace:
// FLEETSIM_TRACE, or the trace beside the checkout (make bench's).
func claimTrace() ([]workload.TraceRecord, error) {
	path := os.Getenv("FLEETSIM_TRACE")
	for _, p := range []string{"../../../shared", "../../../../shared"} {
		if path != "" {
			break
		}
		if p += "/data/traces/mooncake_conversation_trace.jsonl"; fileExists(p) {
			path = p
		}
	}
	if path == "" {
		return nil, errors.New("no conversation trace beside the checkout: set FLEETSIM_TRACE")
	}
	return workload.LoadTraceFile(path, 1000)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// claimFigures are one tier size's figures against one replica, at one seed.
type claimFigures struct{ hit, p50, p99, thr float64 }

func TestMeasureTheTierAgainstOneReplica(t *testing.T) {
	if os.Getenv("FLEETSIM_CLAIMS") != "1" {
		t.Skip("minutes of simulation: FLEETSIM_CLAIMS=1 runs it")
	}
	for _, c := range claimCases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) { measureClaim(t, c) })
	}
}

func measureClaim(t *testing.T, c claimCase) {
	n := measureSeeds(t)
	figs := make([][]claimFigures, n)
	overSeeds(t, n, []string{"seeds run (1 each)"}, func(seed int64) ([]float64, error) {
		var err error
		figs[seed-1], err = claimSeed(t, c, seed)
		return []float64{1}, err
	})
	if c.jittered != nil {
		overSeeds(t, n, []string{"one replica against itself, its arrivals moved by up to 1 ms: hit rate / as loaded"},
			func(seed int64) ([]float64, error) { return jitterSeed(c, seed) })
	}
	for k, replicas := range claimReplicas {
		var each []claimFigures
		for _, f := range figs {
			each = append(each, f[k])
		}
		hit, thr := reportClaim(t, replicas, each)
		if claimsAlone() {
			continue
		}
		if hit < c.hitLow[k] {
			t.Errorf("%d replicas keep %.4f of one replica's hit rate at the worst seed: want at least %.2f", replicas, hit, c.hitLow[k])
		}
		if thr < c.thrLow[k] {
			t.Errorf("%d replicas keep %.4f of one replica's throughput at the worst seed: want at least %.2f", replicas, thr, c.thrLow[k])
		}
	}
}

// jitterSeed runs one replica on the workload as loaded and jittered, at
// seed: the hit rate of the jittered run over the other's.
func jitterSeed(c claimCase, seed int64) ([]float64, error) {
	var hits []float64
	for _, load := range []func(int64) (Workload, error){c.load, c.jittered} {
		w, err := load(seed)
		if err != nil {
			return nil, err
		}
		r, err := Run(claimFleet(c, 1, seed), w)
		if err != nil {
			return nil, err
		}
		hits = append(hits, r.HitRate)
	}
	return []float64{hits[1] / hits[0]}, nil
}

// claimSeed runs one replica and every tier size at seed, and logs the
// tiers' attribution.
func claimSeed(t *testing.T, c claimCase, seed int64) ([]claimFigures, error) {
	run := func(replicas int) (Result, error) {
		load, err := c.load(seed)
		if err != nil {
			return Result{}, err
		}
		cfg := claimFleet(c, replicas, seed)
		cfg.Placer = replicas > 1 && !claimsAlone()
		return Run(cfg, load)
	}
	one, err := run(1)
	if err != nil {
		return nil, err
	}
	var out []claimFigures
	for _, n := range claimReplicas {
		r, err := run(n)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", n, err)
		}
		t.Logf("seed %d, %d replicas: hit %.4f (one %.4f), load cv %.3f (one %.3f), shed %d, judged %+v",
			seed, n, r.HitRate, one.HitRate, r.LoadCV, one.LoadCV, r.Shed, r.Judged)
		out = append(out, claimFigures{hit: r.HitRate / one.HitRate, p50: r.TTFTP50Ms / one.TTFTP50Ms,
			p99: r.TTFTP99Ms / one.TTFTP99Ms, thr: r.ThroughputRPS / one.ThroughputRPS})
	}
	return out, nil
}

// reportClaim logs one tier size's figures over the seeds against the
// targets and returns the minimum hit and throughput ratios.
func reportClaim(t *testing.T, replicas int, each []claimFigures) (hit, thr float64) {
	hit, thr = math.Inf(1), math.Inf(1)
	var hitMax, p50, p99, sumHit, sumThr, sumP50, sumP99 float64
	for _, f := range each {
		hit, thr, p50, p99 = min(hit, f.hit), min(thr, f.thr), max(p50, f.p50), max(p99, f.p99)
		hitMax = max(hitMax, f.hit)
		sumHit, sumThr, sumP50, sumP99 = sumHit+f.hit, sumThr+f.thr, sumP50+f.p50, sumP99+f.p99
	}
	k := float64(len(each))
	t.Logf("%d replicas over %d seeds: hit rate / one's min %.3f mean %.3f max %.3f; TTFT p50 max %.2fx mean %.2fx; "+
		"p99 max %.2fx mean %.2fx; throughput min %.3f mean %.3f; %s", replicas, len(each), hit, sumHit/k, hitMax,
		p50, sumP50/k, p99, sumP99/k, thr, sumThr/k, verdict(hit, p50, p99, thr))
	return hit, thr
}

// verdict names the targets a tier size misses at its worst seeds.
func verdict(hit, p50, p99, thr float64) string {
	var miss []string
	if hit < 0.98 {
		miss = append(miss, fmt.Sprintf("hit %.3f < 0.98", hit))
	}
	if p50 > 1.1 {
		miss = append(miss, fmt.Sprintf("TTFT p50 %.2fx > 1.1x", p50))
	}
	if p99 > 1.1 {
		miss = append(miss, fmt.Sprintf("TTFT p99 %.2fx > 1.1x", p99))
	}
	if thr < 0.95 {
		miss = append(miss, fmt.Sprintf("throughput %.3f < 0.95", thr))
	}
	if len(miss) == 0 {
		return "targets met"
	}
	return "not met: " + strings.Join(miss, "; ")
}
