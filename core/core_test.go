package core

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const blockSize = 16

// tier builds n gossiping cores over workers 1..workers.
func tier(t *testing.T, n, workers int) ([]*Replica, *testingclock.FakeClock) {
	t.Helper()
	return tierWith(t, n, workers, nil)
}

// tierWith is tier with every core's Config changed by tweak first.
func tierWith(t *testing.T, n, workers int, tweak func(*Config)) ([]*Replica, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	var ids []affinity.WorkerID
	for w := 1; w <= workers; w++ {
		ids = append(ids, affinity.WorkerID(w))
	}
	var out []*Replica
	for i := range n {
		cfg := Config{Clock: clk, BlockSize: blockSize, IndexBudget: 1 << 16,
			Gossip: &loadsync.Config{Origin: fmt.Sprintf("replica-%d", i), BootEpoch: uint64(i + 1)}}
		if tweak != nil {
			tweak(&cfg)
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.SetRegistry(ids)
		out = append(out, r)
	}
	return out, clk
}

func router(t *testing.T, r *Replica) *affinity.Router {
	t.Helper()
	rt, err := r.NewRouter(affinity.Settings{Policy: affinity.PolicyCacheAware, MissPlacement: affinity.PlaceLeastLoad, Thresholds: affinity.DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// allPool is every known worker as candidates.
func allPool(r *Replica) *affinity.Pool { return r.reg.load().pool }

// exchange ticks every core at now and delivers each one's packets to the
// others.
func exchange(t *testing.T, rs []*Replica, now time.Time) {
	t.Helper()
	for i, from := range rs {
		for _, p := range from.Tick(now) {
			for j, to := range rs {
				if i != j {
					if err := to.Receive(p, now); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

func decide(t *testing.T, r *Replica, rt *affinity.Router, prompt []byte, pool *affinity.Pool) Decided {
	t.Helper()
	d, g, err := r.Decide(rt, rt.Prepare("m", prompt, 0), pool)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	return d
}

var prompt = bytes.Repeat([]byte("the system prompt and the turns of one conversation. "), 8)

// TestADecisionReachesAPeerOnTheNextTick: what one core decided is a hit,
// from a peer's fact, on another once their ticks carried it.
func TestADecisionReachesAPeerOnTheNextTick(t *testing.T) {
	rs, clk := tier(t, 2, 4)
	a := decide(t, rs[0], router(t, rs[0]), prompt, allPool(rs[0]))
	if a.Hit || a.Fact != FactNone {
		t.Fatalf("the first sight of a prompt was %+v, want a miss knowing nothing", a)
	}
	before := decide(t, rs[1], router(t, rs[1]), prompt[:len(prompt)-blockSize], allPool(rs[1]))
	if before.Hit {
		t.Fatalf("replica-1 matched before any tick: %+v", before)
	}
	clk.Step(loadsync.DefaultLoadInterval)
	exchange(t, rs, clk.Now())
	b := decide(t, rs[1], router(t, rs[1]), prompt, allPool(rs[1]))
	if !b.Hit || b.Worker != a.Worker || b.Fact != FactPeer {
		t.Errorf("after a tick replica-1 decided %+v, want a hit on worker %d from a peer's fact", b, a.Worker)
	}
	again := decide(t, rs[0], router(t, rs[0]), prompt, allPool(rs[0]))
	if !again.Hit || again.Fact != FactOwn {
		t.Errorf("replica-0's own prompt again: %+v, want a hit from its own fact", again)
	}
}

// usage is an answer that found cached of tokens in the engine's cache.
func usage(cached, tokens int) Usage {
	return Usage{PromptTokens: tokens, CachedTokens: cached, HasCached: true}
}

// TestAPredictedHitTheEngineDidNotHoldIsAFalseHit: a hit whose answer shows
// no more cached than the threshold's share is false; one above it is not.
func TestAPredictedHitTheEngineDidNotHoldIsAFalseHit(t *testing.T) {
	rs, _ := tier(t, 1, 4)
	r, rt := rs[0], router(t, rs[0])
	r.Answered(decide(t, r, rt, prompt, allPool(r)), usage(0, 100))
	hit := decide(t, r, rt, prompt, allPool(r))
	if !hit.Hit {
		t.Fatalf("the prompt again was %+v, want a hit", hit)
	}
	r.Answered(hit, usage(30, 100)) // 0.3 is not above the default threshold
	r.Answered(hit, usage(31, 100))
	a := r.Attribution()
	want := Attribution{Judged: 3, PredictedHits: 2, EngineHits: 1, FalseHits: 1, ColdMisses: 1,
		PromptTokens: 300, CachedTokens: 61}
	want.FalseHitsByFact[FactOwn] = 1
	want.PredictedHitsByFact[FactOwn] = 2
	if a != want {
		t.Errorf("attribution %+v, want %+v", a, want)
	}
}

// TestAnAnswerWithoutCachedTokensIsNotJudged: an engine that does not say
// what it had cached leaves every count alone.
func TestAnAnswerWithoutCachedTokensIsNotJudged(t *testing.T) {
	rs, _ := tier(t, 1, 2)
	r := rs[0]
	r.Answered(decide(t, r, router(t, r), prompt, allPool(r)), Usage{PromptTokens: 100})
	if a := r.Attribution(); a != (Attribution{}) {
		t.Errorf("an answer without cached tokens was counted: %+v", a)
	}
}

// TestAMissWhosePeerFactArrivesBeforeTheAnswerIsLostToALateFact: two
// replicas place the same new prompt on different workers in the same
// instant; once the tick carried the other's fact, the engines' misses are
// lost hits of cause peer_fact_late, while a prompt nobody else knows stays
// a cold miss.
func TestAMissWhosePeerFactArrivesBeforeTheAnswerIsLostToALateFact(t *testing.T) {
	rs, clk := tier(t, 2, 4)
	a := decide(t, rs[0], router(t, rs[0]), prompt, allPool(rs[0]).Without(2, 3, 4))
	b := decide(t, rs[1], router(t, rs[1]), prompt, allPool(rs[1]).Without(1, 3, 4))
	lonely := decide(t, rs[1], router(t, rs[1]), []byte("a prompt only replica-1 ever sees, long enough to hash"), allPool(rs[1]))
	clk.Step(loadsync.DefaultLoadInterval)
	exchange(t, rs, clk.Now())
	rs[0].Answered(a, usage(0, 100))
	rs[1].Answered(b, usage(0, 100))
	rs[1].Answered(lonely, usage(0, 100))
	for i, want := range []uint64{1, 1} {
		if got := rs[i].Attribution().Lost[CausePeerFactLate]; got != want {
			t.Errorf("replica-%d counted %d lost hits to a late peer fact, want %d", i, got, want)
		}
	}
	if got := rs[1].Attribution().ColdMisses; got != 1 {
		t.Errorf("replica-1 counted %d cold misses, want 1 (the prompt nobody else knew)", got)
	}
}

// TestAMissOnAnOwnerOutsideTheCandidatesIsLostToIneligibility: the owner
// known is not a candidate (taken out of the pool), the engine misses.
func TestAMissOnAnOwnerOutsideTheCandidatesIsLostToIneligibility(t *testing.T) {
	rs, _ := tier(t, 1, 3)
	r, rt := rs[0], router(t, rs[0])
	first := decide(t, r, rt, prompt, allPool(r))
	d := decide(t, r, rt, prompt, allPool(r).Without(first.Worker))
	if !d.Ineligible || d.Hit {
		t.Fatalf("with its owner out of the pool the prompt was %+v, want an ineligible miss", d)
	}
	r.Answered(d, usage(0, 100))
	if got := r.Attribution().Lost[CauseIneligible]; got != 1 {
		t.Errorf("lost to ineligibility: %d, want 1", got)
	}
}

// TestAShedHitTheEngineMissedIsLostToShedding: an owner far busier than the
// rest is shed; the other engine's miss is a lost hit of cause shed.
func TestAShedHitTheEngineMissedIsLostToShedding(t *testing.T) {
	rs, _ := tier(t, 1, 2)
	r, rt := rs[0], router(t, rs[0])
	first := decide(t, r, rt, prompt, allPool(r))
	r.Loads().SetRemote(first.Worker, 1000)
	d := decide(t, r, rt, prompt, allPool(r))
	if !d.Shed || d.Worker == first.Worker {
		t.Fatalf("with its owner 1000 requests deep the prompt was %+v, want it shed", d)
	}
	r.Answered(d, usage(0, 100))
	if got := r.Attribution().Lost[CauseShed]; got != 1 {
		t.Errorf("lost to shedding: %d, want 1", got)
	}
}

// TestAPeersFactIsChargedAtMostTheLongestChain: one fact claiming a span of
// 2^30 blocks is charged MaxChainBlocks, and facts about workers outside
// the registry are dropped.
func TestAPeersFactIsChargedAtMostTheLongestChain(t *testing.T) {
	r, err := New(Config{Clock: clock.RealClock{}, BlockSize: blockSize, IndexBudget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r.SetRegistry([]affinity.WorkerID{1})
	r.gate.ownership(loadsync.Fact{Hash: 42, Worker: 1, Span: 1 << 30})
	r.gate.ownership(loadsync.Fact{Hash: 43, Worker: 2, Span: 1})
	r.gate.remoteLoad(2, 5)
	if got := r.Index().Blocks(1); got != affinity.MaxChainBlocks {
		t.Errorf("a fact of span 2^30 was charged %d blocks, want %d", got, affinity.MaxChainBlocks)
	}
	if r.Index().Workers() != 1 || r.Loads().Len() != 1 {
		t.Errorf("a worker outside the registry got index blocks (%d workers) or a load entry (%d)",
			r.Index().Workers(), r.Loads().Len())
	}
}

// TestAWorkerThatWentDownLosesItsPrefixes: HealthChanged forgets a down
// worker's facts, so its old prefixes are misses when it comes back.
func TestAWorkerThatWentDownLosesItsPrefixes(t *testing.T) {
	rs, _ := tier(t, 1, 2)
	r, rt := rs[0], router(t, rs[0])
	first := decide(t, r, rt, prompt, allPool(r))
	r.HealthChanged([]affinity.WorkerID{first.Worker})
	if d := decide(t, r, rt, prompt, allPool(r)); d.Hit {
		t.Errorf("a prompt of a worker that went down was a hit: %+v", d)
	}
}

// TestAFalseHitCalibratesTheWorkersBudget: the engine's answer to a
// predicted hit shrinks (not held) or keeps (held) the worker's index
// budget; NoCalibration leaves it alone.
func TestAFalseHitCalibratesTheWorkersBudget(t *testing.T) {
	for _, off := range []bool{false, true} {
		r, err := New(Config{Clock: testingclock.NewFakeClock(time.Time{}), BlockSize: blockSize, IndexBudget: 1 << 10, NoCalibration: off})
		if err != nil {
			t.Fatal(err)
		}
		r.SetRegistry([]affinity.WorkerID{1, 2})
		rt := router(t, r)
		first := decide(t, r, rt, prompt, allPool(r))
		r.Answered(first, usage(0, 100)) // a miss: calibrates nothing
		r.Answered(decide(t, r, rt, prompt, allPool(r)), usage(0, 100))
		want := 0.95
		if off {
			want = 1
		}
		if got := r.Index().Scale(first.Worker); got != want {
			t.Errorf("NoCalibration %v: a false hit left worker %d's scale at %.3f, want %.2f", off, first.Worker, got, want)
		}
	}
}

// TestAFalseHitCalibratesThePeersWithTheNextTick: the engine's answer to a
// hit one replica predicted corrects the worker's budget on every replica
// once the tick carried it (a worker whose engine evicted a prefix stops
// attracting it everywhere), and a held one gives back as much everywhere;
// NoCalibrationGossip keeps the correction on the replica that saw it.
func TestAFalseHitCalibratesThePeersWithTheNextTick(t *testing.T) {
	for _, off := range []bool{false, true} {
		rs, clk := tierWith(t, 3, 4, func(c *Config) { c.NoCalibrationGossip = off })
		r, rt := rs[0], router(t, rs[0])
		first := decide(t, r, rt, prompt, allPool(r))
		r.Answered(first, usage(0, 100))
		r.Answered(decide(t, r, rt, prompt, allPool(r)), usage(0, 100)) // a false hit
		r.Answered(decide(t, r, rt, prompt, allPool(r)), usage(0, 100)) // and another
		r.Answered(decide(t, r, rt, prompt, allPool(r)), usage(100, 100))
		clk.Step(loadsync.DefaultLoadInterval)
		exchange(t, rs, clk.Now())
		want := r.Index().Scale(first.Worker)
		if want >= 1 {
			t.Fatalf("the replica that saw the false hits kept worker %d's scale at %.3f", first.Worker, want)
		}
		if off {
			want = 1
		}
		for _, peer := range rs[1:] {
			if got := peer.Index().Scale(first.Worker); math.Abs(got-want) > 1e-9 {
				t.Errorf("NoCalibrationGossip %v: a peer holds worker %d's scale at %.4f, want %.4f", off, first.Worker, got, want)
			}
		}
	}
}

// placement is r's side of the placer protocol, for the tests that drive
// its questions and answers by hand.
func placement(r *Replica) *Placement { return &Placement{r: r} }
