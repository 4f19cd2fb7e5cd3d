package fleet

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

func TestSameConfigGivesTheSameResult(t *testing.T) {
	for _, cfg := range []Config{
		{Workers: 6, Replicas: 4, Sync: SyncGossip, Policy: affinity.PolicyCacheAware, GossipLoss: 0.2, Seed: 7},
		{Workers: 6, Replicas: 3, Sync: SyncNone, Policy: affinity.PolicyPowerOfTwo, Seed: 7},
		{Prefill: 2, Decode: 3, Replicas: 2, Sync: SyncGossip, Policy: affinity.PolicyCacheAware,
			MissPlacement: affinity.PlaceRendezvous, Seed: 7},
		{Workers: 4, Replicas: 3, Sync: SyncGossip, Door: true, Seed: 7, Engine: sim.Config{KVCapacityTokens: 1 << 14}},
	} {
		first, second := run(t, cfg, smallSessions()), run(t, cfg, smallSessions())
		if !reflect.DeepEqual(first, second) {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", cfg.PolicyLabel(), first, second)
		}
	}
}

func TestSeedChangesTheRun(t *testing.T) {
	cfg := smallFleet(affinity.PolicyRandom, 2, SyncNone)
	first := run(t, cfg, smallSessions())
	cfg.Seed++
	if second := run(t, cfg, smallSessions()); reflect.DeepEqual(first, second) {
		t.Errorf("seeds %d and %d gave the same result %+v", cfg.Seed-1, cfg.Seed, first)
	}
}

func TestSharedSyncWithOneReplicaEqualsOneIndependentReplica(t *testing.T) {
	for _, policy := range []string{affinity.PolicyCacheAware, affinity.PolicyRoundRobin, affinity.PolicyPowerOfTwo} {
		shared := run(t, smallFleet(policy, 1, SyncShared), smallSessions())
		alone := run(t, smallFleet(policy, 1, SyncNone), smallSessions())
		shared.Sync = alone.Sync
		if !reflect.DeepEqual(shared, alone) {
			t.Errorf("%s: shared %+v\nnone %+v", policy, shared, alone)
		}
	}
}

// TestCacheAwareBeatsRoundRobinOnHitRate: over every seed, cache_aware's
// hit rate is ahead by 0.2 and it computes fewer prompt tokens.
func TestCacheAwareBeatsRoundRobinOnHitRate(t *testing.T) {
	lows := overSeeds(t, claimSeeds, []string{"hit rate lead", "round_robin's prompt tokens / cache_aware's"},
		func(seed int64) ([]float64, error) {
			aware, err := runE(seededSmall(smallFleet(affinity.PolicyCacheAware, 1, SyncNone), seed))
			if err != nil {
				return nil, err
			}
			rr, err := runE(seededSmall(smallFleet(affinity.PolicyRoundRobin, 1, SyncNone), seed))
			return []float64{aware.HitRate - rr.HitRate, float64(rr.PrefillTokens) / float64(aware.PrefillTokens)}, err
		})
	if lows[0] < 0.2 {
		t.Errorf("cache_aware's hit rate lead over round_robin: min %.3f over the seeds, want 0.2", lows[0])
	}
	if lows[1] <= 1 {
		t.Errorf("round_robin computed %.3f of cache_aware's prompt tokens at some seed: want more at every seed", lows[1])
	}
}

// TestGossipKeepsMoreHitRateThanIndependentReplicas: over every seed, 4
// gossiping replicas are ahead of 4 independent ones by 0.1 of hit rate
// and keep 0.9 of 4 replicas sharing one state.
func TestGossipKeepsMoreHitRateThanIndependentReplicas(t *testing.T) {
	lows := overSeeds(t, claimSeeds, []string{"gossip's lead over none", "gossip / shared"}, func(seed int64) ([]float64, error) {
		var res [3]Result
		for i, sync := range []Sync{SyncGossip, SyncNone, SyncShared} {
			var err error
			if res[i], err = runE(seededSmall(smallFleet(affinity.PolicyCacheAware, 4, sync), seed)); err != nil {
				return nil, err
			}
		}
		gossip, none, shared := res[0], res[1], res[2]
		if gossip.GossipBytesPerSec == 0 || gossip.GossipFactsLearned == 0 {
			return nil, fmt.Errorf("gossip sent %.0f B/s and taught %d facts: want both", gossip.GossipBytesPerSec, gossip.GossipFactsLearned)
		}
		if none.GossipBytesPerSec != 0 || shared.GossipBytesPerSec != 0 {
			return nil, fmt.Errorf("gossip bytes without gossip: none %.0f, shared %.0f", none.GossipBytesPerSec, shared.GossipBytesPerSec)
		}
		return []float64{gossip.HitRate - none.HitRate, gossip.HitRate / shared.HitRate}, nil
	})
	if lows[0] < 0.1 {
		t.Errorf("4 replicas: gossip's hit rate lead over none: min %.3f, want 0.1", lows[0])
	}
	if lows[1] < 0.9 {
		t.Errorf("4 replicas: gossip's hit rate / shared's: min %.3f, want at least 0.9", lows[1])
	}
}

// TestGossipLossDropsPacketsAndTheFactsInThem: over every seed, 50% loss
// drops packets and fewer facts are learned than without loss.
func TestGossipLossDropsPacketsAndTheFactsInThem(t *testing.T) {
	lows := overSeeds(t, claimSeeds, []string{"packets lost", "facts learned without loss / with"}, func(seed int64) ([]float64, error) {
		cfg := smallFleet(affinity.PolicyCacheAware, 4, SyncGossip)
		cfg.GossipLoss = 0.5
		lossy, err := runE(seededSmall(cfg, seed))
		if err != nil {
			return nil, err
		}
		clean, err := runE(seededSmall(smallFleet(affinity.PolicyCacheAware, 4, SyncGossip), seed))
		return []float64{float64(lossy.GossipPacketsLost), float64(clean.GossipFactsLearned) / float64(max(lossy.GossipFactsLearned, 1))}, err
	})
	if lows[0] == 0 {
		t.Error("no packet lost at 50% loss at some seed")
	}
	if lows[1] <= 1 {
		t.Errorf("facts learned without loss / with: min %.3f, want fewer with loss at every seed", lows[1])
	}
}

func TestEveryGuardIsReleasedByTheEnd(t *testing.T) {
	for _, cfg := range []Config{
		smallFleet(affinity.PolicyCacheAware, 4, SyncGossip),
		smallFleet(affinity.PolicyLeastLoad, 2, SyncShared),
		{Prefill: 2, Decode: 3, Replicas: 3, Sync: SyncNone, Seed: 1},
	} {
		s, err := newSimulation(cfg.withDefaults(), NewAgentic(smallSessions()))
		if err != nil {
			t.Fatal(err)
		}
		s.run()
		for _, r := range s.replicas {
			for _, l := range r.own {
				if l.Local() != 0 {
					t.Errorf("%s sync=%s: %s still counts %d in flight on worker %d",
						cfg.PolicyLabel(), cfg.Sync, r.name, l.Local(), l.ID())
				}
			}
		}
		if len(s.inflight) != 0 {
			t.Errorf("%d requests never finished", len(s.inflight))
		}
	}
}

func TestSplitFleetPrefillsThenDecodes(t *testing.T) {
	cfg := Config{Prefill: 2, Decode: 3, Replicas: 2, Sync: SyncGossip, Seed: 1, Engine: sim.Config{KVCapacityTokens: 1 << 18}}
	s, err := newSimulation(cfg.withDefaults(), NewAgentic(smallSessions()))
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	res := s.result()
	if res.PD != "2:3" || res.Workers != 5 {
		t.Errorf("pd %q with %d workers, want 2:3 with 5", res.PD, res.Workers)
	}
	var prefilled, transferred uint64
	for _, w := range s.workers[:2] {
		prefilled += w.engine.ComputedTokens()
		if w.engine.TransferredTokens() != 0 {
			t.Errorf("prefill worker %d received %d tokens of KV", w.id, w.engine.TransferredTokens())
		}
	}
	for _, w := range s.workers[2:] {
		transferred += w.engine.TransferredTokens()
	}
	if prefilled == 0 || res.PrefillTokens < prefilled {
		t.Errorf("prefill workers computed %d tokens, report says %d in all", prefilled, res.PrefillTokens)
	}
	if transferred == 0 {
		t.Error("no KV reached the decode workers")
	}
	if res.HitRate == 0 || res.TTFTP50Ms <= 0 {
		t.Errorf("prefill hit rate %.3f, TTFT p50 %.1f ms: want both above zero", res.HitRate, res.TTFTP50Ms)
	}
}

// TestMeasureTheFleetGateLosingPrefillAffinityToAHotPrefillWorker measures
// the seed's shape, scaled down: a prefill-heavy fleet of 4 prefill and 6
// decode workers, rollouts in groups sharing their task, and one prefill
// worker running four times slower: the hot worker that opens the
// fleet-wide gate for every request. The balance threshold is scaled down
// with the concurrency (192 sessions, not 1024). Over measureSeeds seeds
// the gate's prefill hit rate is behind per-request affinity's, and it
// gives up more hits.
func TestMeasureTheFleetGateLosingPrefillAffinityToAHotPrefillWorker(t *testing.T) {
	lows := overSeeds(t, measureSeeds(t), []string{"per-request hit rate lead over the gate", "hits the gate gave up more"},
		func(seed int64) ([]float64, error) {
			sessions := workload.AgenticConfig{
				Sessions: 192, Turns: 8, SystemPromptTokens: 2048, TaskTokens: 64,
				ObservationTokens: 1024, AnswerTokens: 32, ThinkTime: 500_000_000, Seed: 4 + seed,
			}
			cfg := Config{
				Prefill: 4, Decode: 6, Sync: SyncNone, Seed: seed,
				Thresholds: affinity.Thresholds{CacheThreshold: 0.3, BalanceAbs: 8, BalanceRel: 1.5},
				Engine:     sim.Config{KVCapacityTokens: 1 << 21}, Slowdown: map[affinity.WorkerID]float64{1: 4},
			}
			var res [2]Result
			for i, policy := range []string{affinity.PolicyFleetGate, affinity.PolicyCacheAware} {
				load, err := NewAgenticGroups(sessions, Groups{Count: 24, ObservationSpread: 1})
				if err != nil {
					return nil, err
				}
				cfg.Policy = policy
				if res[i], err = Run(cfg, load); err != nil {
					return nil, err
				}
			}
			gate, perRequest := res[0], res[1]
			return []float64{perRequest.HitRate - gate.HitRate, float64(gate.Shed - perRequest.Shed)}, nil
		})
	if lows[0] <= 0 {
		t.Errorf("prefill hit rate: the fleet gate ahead of or level with cache_aware at some seed (lead min %.3f): want it behind", lows[0])
	}
	if lows[1] <= 0 {
		t.Errorf("hits given up: the gate gave up %.0f more than cache_aware at some seed: want more at every seed", lows[1])
	}
}

func TestAPromptLargerThanTheCacheIsAnError(t *testing.T) {
	sessions := smallSessions()
	sessions.Sessions, sessions.Turns = 2, 3
	cfg := Config{Workers: 2, Replicas: 2, Sync: SyncGossip, Seed: 1, Engine: sim.Config{KVCapacityTokens: 1024}}
	res := run(t, cfg, sessions)
	if res.Errors != sessions.Sessions*sessions.Turns {
		t.Errorf("%d errors, want every request refused (%d)", res.Errors, sessions.Sessions*sessions.Turns)
	}
}

func TestTraceReplaysEveryRecord(t *testing.T) {
	records := []workload.TraceRecord{
		{Timestamp: 0, InputLength: 600, OutputLength: 4, HashIDs: []int64{1, 2}},
		{Timestamp: 0, InputLength: 600, OutputLength: 4, HashIDs: []int64{1, 2}},
		{Timestamp: 2_000_000_000, InputLength: 1100, OutputLength: 4, HashIDs: []int64{1, 2, 3}},
	}
	res, err := Run(Config{Workers: 2, Replicas: 1, Seed: 1}, NewTrace(records, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != len(records) {
		t.Fatalf("%d requests, want %d", res.Requests, len(records))
	}
	if res.MakespanSeconds < 2 {
		t.Errorf("makespan %.3f s, want past the last arrival at 2 s", res.MakespanSeconds)
	}
	if res.HitRate == 0 {
		t.Error("repeated prefixes found nothing cached")
	}
}

func TestARefusedGossipPacketFailsTheRun(t *testing.T) {
	s, err := newSimulation(smallFleet(affinity.PolicyCacheAware, 2, SyncGossip).withDefaults(), NewAgentic(smallSessions()))
	if err != nil {
		t.Fatal(err)
	}
	s.deliver(1, [][]byte{{0xff, 0xff, 0xff}})
	if !errors.Is(s.err, ErrGossip) {
		t.Fatalf("error %v, want ErrGossip", s.err)
	}
	s.run()
	if s.pending == 0 {
		t.Error("the run went on after a refused packet")
	}
}

// With replicas that share nothing, only a session-sticky balancer lets each
// replica see every turn of its sessions, so it keeps their hits.
func TestStickySessionsKeepEachSessionOnTheReplicaThatKnowsIt(t *testing.T) {
	random := run(t, smallFleet(affinity.PolicyCacheAware, 4, SyncNone), smallSessions())
	cfg := smallFleet(affinity.PolicyCacheAware, 4, SyncNone)
	cfg.StickySessions = true
	sticky := run(t, cfg, smallSessions())
	one := run(t, smallFleet(affinity.PolicyCacheAware, 1, SyncNone), smallSessions())
	t.Logf("hit rate: one replica %.3f, 4 sticky %.3f, 4 random %.3f", one.HitRate, sticky.HitRate, random.HitRate)
	if sticky.HitRate < random.HitRate+0.1 {
		t.Errorf("4 independent replicas: sticky hit rate %.3f, random %.3f: want sticky ahead by 0.1", sticky.HitRate, random.HitRate)
	}
	if sticky.HitRate < 0.9*one.HitRate {
		t.Errorf("4 independent sticky replicas keep %.3f against one replica's %.3f: want at least 0.9 of it", sticky.HitRate, one.HitRate)
	}
}
