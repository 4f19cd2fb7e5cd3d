package affinity

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newFakeClock returns a clock standing at the Unix epoch that moves only on Step.
func newFakeClock() *testingclock.FakeClock { return testingclock.NewFakeClock(time.Unix(0, 0)) }

// fleet is a replica's view of n workers with ids 1..n, all candidates.
type fleet struct {
	loads  *LoadTable
	index  *Index
	pool   *Pool
	router *Router
	clock  *testingclock.FakeClock
}

const testBlock = 8

func newFleet(t testing.TB, n int, s Settings) *fleet {
	t.Helper()
	f := &fleet{loads: NewLoadTable(nil), clock: newFakeClock()}
	f.index = NewIndex(f.clock, 1<<20)
	var members []*Load
	for i := 1; i <= n; i++ {
		members = append(members, f.loads.Get(WorkerID(i)))
	}
	f.pool = NewPool(members)
	if s.Policy == "" {
		s.Policy = PolicyCacheAware
	}
	if s.MissPlacement == "" {
		s.MissPlacement = PlaceLeastLoad
	}
	if s.Thresholds == (Thresholds{}) {
		s.Thresholds = DefaultThresholds()
	}
	s.BlockSize = testBlock
	p, err := NewPolicy(s, f.index)
	if err != nil {
		t.Fatal(err)
	}
	f.router = NewRouter(p, f.loads, f.index, testBlock, nil)
	return f
}

// route routes text and releases the guard at once, returning the decision.
func (f *fleet) route(t testing.TB, text string) Decision {
	t.Helper()
	d, g := f.hold(t, text)
	g.Release()
	return d
}

// hold routes text and keeps the request in flight.
func (f *fleet) hold(t testing.TB, text string) (Decision, *Guard) {
	t.Helper()
	d, g, err := f.router.Route(f.router.Prepare("m", []byte(text), 0), f.pool)
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

// setLoad pins worker w's merged load through its remote share.
func (f *fleet) setLoad(w WorkerID, n int64) { f.loads.SetRemote(w, n) }

func text(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d|", seed, i)
	}
	return b.String()[:n]
}

func TestSameTextTwiceGoesToTheSameWorker(t *testing.T) {
	f := newFleet(t, 4, Settings{})
	s := text("conv", 200)
	first := f.route(t, s)
	f.setLoad(first.Worker, 3) // it got busier than the others, but not overloaded
	second := f.route(t, s)
	if second.Worker != first.Worker || !second.Hit {
		t.Fatalf("second request went to %d (hit %v), want %d as a hit", second.Worker, second.Hit, first.Worker)
	}
}

func TestPrefixOfASeenTextGoesToTheSameWorker(t *testing.T) {
	f := newFleet(t, 4, Settings{})
	long := text("conv", 400)
	first := f.route(t, long)
	f.setLoad(first.Worker, 2)
	if d := f.route(t, long[:200]); d.Worker != first.Worker || !d.Hit {
		t.Fatalf("prefix went to %d (hit %v), want %d", d.Worker, d.Hit, first.Worker)
	}
}

func TestGrowingConversationStaysOnItsWorker(t *testing.T) {
	f := newFleet(t, 8, Settings{})
	conv := text("turn0", 100)
	first := f.route(t, conv)
	for turn := 1; turn < 10; turn++ {
		f.setLoad(first.Worker, int64(turn)) // busier every turn, never overloaded
		conv += text(fmt.Sprintf("turn%d", turn), 60)
		if d := f.route(t, conv); d.Worker != first.Worker || !d.Hit {
			t.Fatalf("turn %d went to %d, want %d", turn, d.Worker, first.Worker)
		}
	}
}

// TestCacheThresholdIsStrict pins that the hit needs strictly more than
// cache_threshold of the text matched: 45% and exactly 50% miss, 55% hits.
func TestCacheThresholdIsStrict(t *testing.T) {
	for _, tc := range []struct {
		name       string
		seenBlocks int // of a 20-block (160-byte) text
		hit        bool
	}{
		{"45% is a miss", 9, false},
		{"exactly the threshold is a miss", 10, false},
		{"55% is a hit", 11, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := DefaultThresholds()
			th.CacheThreshold = 0.5
			f := newFleet(t, 2, Settings{Thresholds: th})
			full := text("x", 20*testBlock)
			owner := f.route(t, full[:tc.seenBlocks*testBlock]).Worker
			f.setLoad(owner, 1) // a miss goes to the other, idle worker
			d := f.route(t, full)
			if d.Hit != tc.hit || (d.Worker == owner) != tc.hit {
				t.Fatalf("hit=%v worker=%d (owner %d), want hit=%v", d.Hit, d.Worker, owner, tc.hit)
			}
		})
	}
}

func TestOverloadNeedsBothConditionsStrictly(t *testing.T) {
	th := Thresholds{BalanceAbs: 64, BalanceRel: 1.5}
	for _, tc := range []struct {
		load, min int64
		want      bool
	}{
		{load: 200, min: 100, want: true},
		{load: 164, min: 100, want: false},  // abs difference exactly 64
		{load: 165, min: 100, want: true},   // 65 > 64 and 165 > 150
		{load: 150, min: 50, want: true},    // 100 > 64 and 150 > 75
		{load: 300, min: 200, want: false},  // abs holds, 300 is exactly 1.5 x 200
		{load: 1000, min: 900, want: false}, // abs holds, rel 1.11 does not
		{load: 64, min: 0, want: false},     // abs exactly 64
		{load: 65, min: 0, want: true},
		{load: 60, min: 10, want: false}, // rel holds, abs does not
	} {
		if got := th.Overloaded(tc.load, tc.min); got != tc.want {
			t.Errorf("Overloaded(%d, min %d) = %v, want %v", tc.load, tc.min, got, tc.want)
		}
	}
}

func TestUTF8TextIsMatchedByBytes(t *testing.T) {
	f := newFleet(t, 4, Settings{})
	s := strings.Repeat("héllo wörld ✓ ", 12) // chars and bytes disagree
	first := f.route(t, s)
	f.setLoad(first.Worker, 2)
	d := f.route(t, s)
	if d.Worker != first.Worker || d.Total != len(s) || d.Matched != len(s)/testBlock*testBlock {
		t.Fatalf("got %+v, want worker %d with %d of %d bytes matched", d, first.Worker, len(s)/testBlock*testBlock, len(s))
	}
}

func TestDeadOwnerFallsBackAndIsForgotten(t *testing.T) {
	f := newFleet(t, 3, Settings{})
	s := text("conv", 200)
	owner := f.route(t, s).Worker
	f.index.Forget(owner) // the proxy does this when the worker turns unhealthy
	alive := f.pool.Without(owner)
	d, g, err := f.router.Route(f.router.Prepare("m", []byte(s), 0), alive)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if d.Worker == owner || d.Hit {
		t.Fatalf("fell back to %d (hit %v), want another worker as a miss", d.Worker, d.Hit)
	}
	// The owner recovers: its old keys are now the fallback's, not its own.
	f.setLoad(d.Worker, 1)
	if again := f.route(t, s); again.Worker != d.Worker || !again.Hit {
		t.Fatalf("after recovery went to %d (hit %v), want %d", again.Worker, again.Hit, d.Worker)
	}
	if n := f.index.Blocks(owner); n != 0 {
		t.Fatalf("recovered worker still owns %d blocks", n)
	}
}

func TestHitsStayCorrectAtManyWorkerCounts(t *testing.T) {
	for _, n := range []int{1, 4, 16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFleet(t, n, Settings{})
			where := map[string]WorkerID{}
			for i := range 200 {
				s := text(fmt.Sprint("conversation", i), 120)
				where[s] = f.route(t, s).Worker
			}
			for s, w := range where {
				if d := f.route(t, s); d.Worker != w || !d.Hit {
					t.Fatalf("text routed to %d then %d (hit %v)", w, d.Worker, d.Hit)
				}
			}
		})
	}
}

// TestAffinitySurvivesAnUnrelatedHotWorker is the seed regression: a hot
// worker elsewhere must not cost the request its cached worker. The old
// fleet-wide gate loses it in the same scenario.
func TestAffinitySurvivesAnUnrelatedHotWorker(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		keepsHit bool
	}{{PolicyCacheAware, true}, {PolicyFleetGate, false}} {
		t.Run(tc.policy, func(t *testing.T) {
			f := newFleet(t, 4, Settings{Policy: tc.policy})
			s := text("conv", 200)
			owner := f.route(t, s).Worker
			hot := owner%4 + 1
			f.setLoad(owner, 5)
			f.setLoad(hot, 200) // far above everyone: the fleet looks imbalanced
			d := f.route(t, s)
			if (d.Worker == owner) != tc.keepsHit {
				t.Fatalf("went to %d (owner %d, hot %d), kept affinity = %v, want %v", d.Worker, owner, hot, d.Worker == owner, tc.keepsHit)
			}
		})
	}
}

func TestAffinityYieldsWhenTheCachedWorkerIsHot(t *testing.T) {
	f := newFleet(t, 4, Settings{})
	s := text("conv", 200)
	owner := f.route(t, s).Worker
	f.setLoad(owner, 100) // 100 - 0 > 64 and 100 > 0 * 1.5
	d := f.route(t, s)
	if d.Worker == owner || d.Hit || !d.Shed {
		t.Fatalf("got %+v, want the hot owner %d shed", d, owner)
	}
}

// TestMinIsTakenOverCandidatesOnly: an idle worker that is not a candidate
// (unhealthy, wrong model, draining) must not make the owner look overloaded.
func TestMinIsTakenOverCandidatesOnly(t *testing.T) {
	f := newFleet(t, 3, Settings{})
	f.loads.Get(99) // an ineligible worker with load 0, known to the table
	s := text("conv", 200)
	owner := f.route(t, s).Worker
	for i := 1; i <= 3; i++ {
		f.setLoad(WorkerID(i), 10)
	}
	f.setLoad(owner, 70) // 60 above the candidates' min of 10; 70 above worker 99's 0
	if d := f.route(t, s); d.Worker != owner {
		t.Fatalf("went to %d, want owner %d: min must ignore non-candidates", d.Worker, owner)
	}
}

func TestEqualLoadsBreakTiesByProcessedThenTheRequest(t *testing.T) {
	// Within a replica equal loads take turns (processed); the rest is the
	// request's own rendezvous order, not the pool's order, so that
	// replicas with no history do not all start from the first worker.
	f := newFleet(t, 3, Settings{Policy: PolicyLeastLoad})
	var got []WorkerID
	for range 6 {
		got = append(got, f.route(t, "").Worker) // each released at once: loads stay equal
	}
	if !slices.Equal(got[:3], got[3:]) || len(map[WorkerID]bool{got[0]: true, got[1]: true, got[2]: true}) != 3 {
		t.Fatalf("picked %v: want each worker once in turn, the same turn twice", got)
	}
	firsts := map[WorkerID]bool{}
	for i := range 20 {
		firsts[newFleet(t, 3, Settings{Policy: PolicyLeastLoad}).route(t, fmt.Sprint("request ", i)).Worker] = true
	}
	if len(firsts) != 3 {
		t.Fatalf("the first request of 20 fresh replicas went to %v: want every worker, by the request", firsts)
	}
}

// TestConcurrentColdRequestsSpread: requests that arrive together and all
// miss must see each other's reservations instead of piling onto worker 1.
func TestConcurrentColdRequestsSpread(t *testing.T) {
	const workers, requests = 4, 64
	f := newFleet(t, workers, Settings{})
	var wg sync.WaitGroup
	start := make(chan struct{})
	guards := make([]*Guard, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, guards[i] = f.hold(t, text(fmt.Sprint("cold", i), 64))
		}()
	}
	close(start)
	wg.Wait()
	for i := 1; i <= workers; i++ {
		if n := f.loads.Get(WorkerID(i)).Local(); n != requests/workers {
			t.Errorf("worker %d holds %d requests, want %d", i, n, requests/workers)
		}
	}
	for _, g := range guards {
		g.Release()
	}
}

func TestRendezvousPlacesANewPrefixAlikeOnIndependentReplicas(t *testing.T) {
	a := newFleet(t, 16, Settings{MissPlacement: PlaceRendezvous})
	b := newFleet(t, 16, Settings{MissPlacement: PlaceRendezvous})
	b.setLoad(3, 2) // views differ a little, as they do across replicas
	spread := map[WorkerID]bool{}
	for i := range 50 {
		s := text(fmt.Sprint("new", i), 100)
		wa, wb := a.route(t, s).Worker, b.route(t, s).Worker
		if wa != wb {
			t.Fatalf("replicas placed %q on %d and %d", s[:10], wa, wb)
		}
		spread[wa] = true
	}
	if len(spread) < 8 {
		t.Fatalf("50 prefixes landed on only %d of 16 workers", len(spread))
	}
}

func TestRendezvousSkipsOverloadedWorkers(t *testing.T) {
	f := newFleet(t, 4, Settings{MissPlacement: PlaceRendezvous})
	s := text("new", 100)
	first := f.route(t, s).Worker
	f.index.Forget(first)
	f.setLoad(first, 500)
	if d := f.route(t, s); d.Worker == first {
		t.Fatalf("rendezvous placed on overloaded worker %d", first)
	}
}

func TestGuardReleasesExactlyOnce(t *testing.T) {
	var under []WorkerID
	loads := NewLoadTable(func(w WorkerID) { under = append(under, w) })
	l := loads.Get(7)
	g := loads.Acquire(l)
	if !g.Release() || g.Release() || l.Local() != 0 {
		t.Fatalf("release twice: local=%d", l.Local())
	}
	stray := &Guard{load: l, table: loads}
	stray.Release() // a guard that was never counted: a bug elsewhere
	if l.Local() != 0 || len(under) != 1 || under[0] != 7 {
		t.Fatalf("local=%d underflows=%v, want clamped at 0 and reported", l.Local(), under)
	}
}

func TestRoundRobinCycles(t *testing.T) {
	f := newFleet(t, 3, Settings{Policy: PolicyRoundRobin})
	var got []WorkerID
	for range 6 {
		d, g := f.hold(t, "x")
		got = append(got, d.Worker)
		_ = g // held: round robin ignores load
	}
	if fmt.Sprint(got) != "[1 2 3 1 2 3]" {
		t.Fatalf("got %v", got)
	}
}

func TestConsistentHashIsStableAndMovesLittle(t *testing.T) {
	f := newFleet(t, 8, Settings{Policy: PolicyConsistentHash})
	pick := func(pool *Pool, key uint64) WorkerID {
		d, g, err := f.router.Route(&Request{SessionKey: key}, pool)
		if err != nil {
			t.Fatal(err)
		}
		g.Release()
		return d.Worker
	}
	moved := 0
	smaller := f.pool.Without(8)
	for key := range uint64(1000) {
		w := pick(f.pool, key)
		if pick(f.pool, key) != w {
			t.Fatal("same key, different worker")
		}
		if w2 := pick(smaller, key); w2 != w {
			moved++
			if w != 8 {
				t.Fatalf("key %d moved from %d to %d though its worker stayed", key, w, w2)
			}
		}
	}
	if moved < 60 || moved > 200 {
		t.Fatalf("removing 1 of 8 workers moved %d of 1000 keys, want about 125", moved)
	}
}

func TestPowerOfTwoPrefersTheLessLoaded(t *testing.T) {
	f := newFleet(t, 2, Settings{Policy: PolicyPowerOfTwo})
	f.setLoad(1, 10)
	for range 20 {
		if d := f.route(t, "x"); d.Worker != 2 {
			t.Fatalf("picked loaded worker %d", d.Worker)
		}
	}
}

func TestNoCandidatesIsAnError(t *testing.T) {
	f := newFleet(t, 1, Settings{})
	if _, _, err := f.router.Route(f.router.Prepare("m", []byte("x"), 0), NewPool(nil)); err != ErrNoCandidates {
		t.Fatalf("err = %v", err)
	}
}

func TestUnknownPolicyAndPlacementAreRefused(t *testing.T) {
	if _, err := NewPolicy(Settings{Policy: "fastest", MissPlacement: PlaceLeastLoad, BlockSize: 8}, nil); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if _, err := NewPolicy(Settings{Policy: PolicyCacheAware, MissPlacement: "nearest", BlockSize: 8}, nil); err == nil {
		t.Fatal("unknown miss placement accepted")
	}
}

// TestEachPolicySaysWhatItRoutesBy: callers ask a policy what it places
// requests by, never its name; the answers are pinned here, the one place
// that knows which policy is which.
func TestEachPolicySaysWhatItRoutesBy(t *testing.T) {
	byPrefix := map[string]bool{PolicyCacheAware: true, PolicyFleetGate: true}
	bySession := map[string]bool{PolicyConsistentHash: true}
	for _, name := range PolicyNames {
		p, err := NewPolicy(Settings{Policy: name, MissPlacement: PlaceLeastLoad, BlockSize: 8}, NewIndex(clock.RealClock{}, 16))
		if err != nil {
			t.Fatal(err)
		}
		if got := RoutesByPrefix(p); got != byPrefix[name] {
			t.Errorf("%s: RoutesByPrefix %v, want %v", name, got, byPrefix[name])
		}
		if got := UsesSessionKey(p); got != bySession[name] {
			t.Errorf("%s: UsesSessionKey %v, want %v", name, got, bySession[name])
		}
		r := NewRouter(p, NewLoadTable(nil), NewIndex(clock.RealClock{}, 16), 8, nil)
		if r.RoutesByPrefix() != byPrefix[name] || r.UsesSessionKey() != bySession[name] {
			t.Errorf("%s: the router answers otherwise than its policy", name)
		}
	}
}
