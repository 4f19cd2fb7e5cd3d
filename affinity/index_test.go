package affinity

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func chain(model string, n int, seed string) []uint64 {
	return BlockHashes(nil, model, []byte(text(seed, n*testBlock)), testBlock)
}

func TestBlockHashesChainAndSeedByModel(t *testing.T) {
	a := []byte(text("a", 10*testBlock))
	b := append([]byte(string(a[:6*testBlock])), text("b", 4*testBlock)...)
	ha, hb := BlockHashes(nil, "m", a, testBlock), BlockHashes(nil, "m", b, testBlock)
	for i := range 6 {
		if ha[i] != hb[i] {
			t.Fatalf("shared block %d hashes differently", i)
		}
	}
	if ha[6] == hb[6] {
		t.Fatal("diverging block hashes alike")
	}
	if other := BlockHashes(nil, "other-model", a, testBlock); other[0] == ha[0] {
		t.Fatal("the model name does not seed the chain")
	}
	if n := len(BlockHashes(nil, "m", a[:3*testBlock+5], testBlock)); n != 3 {
		t.Fatalf("%d hashes for 3 full blocks and a partial one", n)
	}
}

func TestIndexEvictsLeastRecentlyUsedWithinTheBudget(t *testing.T) {
	clock := newFakeClock()
	ix := NewIndex(clock, 10)
	old, recent := chain("m", 6, "old"), chain("m", 6, "recent")
	ix.Insert(old, 1)
	ix.Insert(recent, 1)
	if n := ix.Blocks(1); n != 10 {
		t.Fatalf("owner holds %d blocks, want its budget of 10", n)
	}
	pool := NewPool([]*Load{{id: 1}})
	if d, _ := ix.Match(recent, pool, nil); d != 5 {
		t.Fatalf("recent chain matched to depth %d, want 5", d)
	}
	// The old chain lost its deepest blocks first: what stays is a prefix.
	if d, _ := ix.Match(old, pool, nil); d != 3 {
		t.Fatalf("old chain matched to depth %d, want 3 (its two deepest blocks evicted)", d)
	}
}

func TestIndexBudgetIsPerWorker(t *testing.T) {
	ix := NewIndex(newFakeClock(), 4)
	ix.Insert(chain("m", 4, "a"), 1)
	ix.Insert(chain("m", 4, "b"), 2)
	ix.SetBudget(2, 2)
	if ix.Blocks(1) != 4 || ix.Blocks(2) != 2 {
		t.Fatalf("blocks: worker 1 %d, worker 2 %d", ix.Blocks(1), ix.Blocks(2))
	}
}

func TestSparseLearnedFactsStillMatchDeep(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	h := chain("m", 20, "conv")
	ix.Learn(Fact{Hash: h[15], Worker: 3}) // only the deepest block of an earlier turn
	pool := NewPool([]*Load{{id: 2}, {id: 3}})
	d, owners := ix.Match(h, pool, nil)
	if d != 15 || len(owners) != 1 || owners[0] != 3 {
		t.Fatalf("matched depth %d owners %v, want 15 [3]", d, owners)
	}
}

func TestMatchIgnoresOwnersOutsideThePool(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	h := chain("m", 8, "conv")
	ix.Insert(h, 5)
	ix.Insert(h[:3], 6)
	d, owners := ix.Match(h, NewPool([]*Load{{id: 6}}), nil)
	if d != 2 || len(owners) != 1 || owners[0] != 6 {
		t.Fatalf("depth %d owners %v, want 2 [6]", d, owners)
	}
}

func TestExpireDropsIdleFacts(t *testing.T) {
	clock := newFakeClock()
	ix := NewIndex(clock, 100)
	ix.Insert(chain("m", 3, "idle"), 1)
	clock.Step(time.Hour)
	ix.Insert(chain("m", 3, "busy"), 1)
	ix.Expire(clock.Now().Add(-time.Minute))
	if n := ix.Blocks(1); n != 3 {
		t.Fatalf("%d blocks left, want the 3 busy ones", n)
	}
}

func TestRemovedWorkerIsNeverRecordedAgain(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	ix.Insert(chain("m", 3, "a"), 1)
	ix.RemoveWorker(1)
	ix.Insert(chain("m", 3, "b"), 1)
	ix.Learn(Fact{Hash: 42, Worker: 1})
	if n := ix.Blocks(1); n != 0 {
		t.Fatalf("removed worker owns %d blocks", n)
	}
}

// naiveFact is one ownership fact of the reference model.
type naiveFact struct {
	h uint64
	w WorkerID
}

// naiveUse is a fact's last use and the blocks it is charged.
type naiveUse struct {
	tick, weight int
	inserted     bool
}

// naiveTrim evicts w's least recently used facts until the blocks charged
// to w fit budget.
func naiveTrim(facts map[naiveFact]naiveUse, w WorkerID, budget int) {
	for naiveCharged(facts, w) > budget {
		oldest, oldestTick := naiveFact{}, -1
		for k, u := range facts {
			if k.w == w && (oldestTick < 0 || u.tick < oldestTick) {
				oldest, oldestTick = k, u.tick
			}
		}
		delete(facts, oldest)
	}
}

func naiveCharged(facts map[naiveFact]naiveUse, w WorkerID) int {
	n := 0
	for k, u := range facts {
		if k.w == w {
			n += u.weight
		}
	}
	return n
}

// TestMatchAgreesWithANaiveIndex checks the index against a plain map model
// under random inserts, learned facts of random spans, evictions and
// lookups: the same matches and the same blocks charged to every worker.
func TestMatchAgreesWithANaiveIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const budget = 40
	ix := NewIndex(newFakeClock(), budget)
	naive := map[naiveFact]naiveUse{}
	tick := 0
	var chains [][]uint64
	for i := range 30 {
		chains = append(chains, chain("m", 1+rng.IntN(12), string(rune('a'+i))))
	}
	all := []*Load{{id: 1}, {id: 2}, {id: 3}}
	for range 3000 {
		c, w := chains[rng.IntN(len(chains))], WorkerID(1+rng.IntN(3))
		switch rng.IntN(4) {
		case 0, 1:
			ix.Insert(c, w)
			for i := len(c) - 1; i >= 0; i-- {
				tick++
				naive[naiveFact{c[i], w}] = naiveUse{tick, 1, true}
			}
			naiveTrim(naive, w, budget)
		case 2:
			h, span := c[rng.IntN(len(c))], uint32(rng.IntN(60))
			ix.Learn(Fact{Hash: h, Worker: w, Span: span})
			tick++
			weight := min(max(int(span), 1), budget)
			old, held := naive[naiveFact{h, w}]
			if held && old.inserted {
				weight = 1
			}
			naive[naiveFact{h, w}] = naiveUse{tick, weight, held && old.inserted}
			naiveTrim(naive, w, budget)
		default:
			pool := NewPool(all[:1+rng.IntN(3)])
			gotDepth, got := ix.Match(c, pool, nil)
			wantDepth, want := naiveMatch(naive, c, pool)
			if gotDepth != wantDepth || len(got) != len(want) {
				t.Fatalf("Match = %d %v, naive %d %v", gotDepth, got, wantDepth, want)
			}
		}
		if got, want := ix.Blocks(w), naiveCharged(naive, w); got != want {
			t.Fatalf("worker %d is charged %d blocks, naive %d", w, got, want)
		}
	}
}

func naiveMatch(facts map[naiveFact]naiveUse, c []uint64, pool *Pool) (int, map[WorkerID]bool) {
	want := map[WorkerID]bool{}
	for d := len(c) - 1; d >= 0; d-- {
		for k := range facts {
			if k.h == c[d] && pool.Contains(k.w) {
				want[k.w] = true
			}
		}
		if len(want) > 0 {
			return d, want
		}
	}
	return -1, want
}

func TestLearnedFactIsChargedItsSpan(t *testing.T) {
	ix := NewIndex(newFakeClock(), 60)
	old := chain("m", 20, "old")
	ix.Insert(old, 1)
	learned := chain("m", 50, "learned")
	ix.Learn(Fact{Hash: learned[49], Worker: 1, Span: 50})
	if n := ix.Blocks(1); n != 60 {
		t.Fatalf("worker charged %d blocks, want its budget of 60", n)
	}
	pool := NewPool([]*Load{{id: 1}})
	// 20 + 50 exceed 60: the old chain's 10 deepest blocks made room.
	if d, _ := ix.Match(old, pool, nil); d != 9 {
		t.Fatalf("old chain matched to depth %d, want 9", d)
	}
	if d, _ := ix.Match(learned, pool, nil); d != 49 {
		t.Fatalf("learned chain matched to depth %d, want 49", d)
	}
}

// TestLearningAFactAgainTakesTheNewCharge: a fact announced again by another
// replica is charged once, and one demoted to a span of 1 (a deeper fact of
// its conversation now stands for its stretch) frees the rest.
func TestLearningAFactAgainTakesTheNewCharge(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	f := Fact{Hash: 7, Worker: 1, Span: 30}
	ix.Learn(f)
	ix.Learn(f)
	if n := ix.Blocks(1); n != 30 {
		t.Fatalf("charged %d after the same fact twice, want 30", n)
	}
	f.Span = 1
	ix.Learn(f)
	if n := ix.Blocks(1); n != 1 {
		t.Fatalf("charged %d after a demotion to span 1, want 1", n)
	}
	f.Span = 45
	ix.Learn(f)
	if n := ix.Blocks(1); n != 45 {
		t.Fatalf("charged %d after a larger span, want 45", n)
	}
}

func TestAnInsertedFactKeepsItsChargeOfOne(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	h := chain("m", 4, "conv")
	ix.Insert(h, 1)
	ix.Learn(Fact{Hash: h[3], Worker: 1, Span: 4})
	if n := ix.Blocks(1); n != 4 {
		t.Fatalf("charged %d, want the 4 inserted blocks only", n)
	}
}

func TestInsertChargesALearnedBlockAsItselfAlone(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	h := chain("m", 8, "conv")
	ix.Learn(Fact{Hash: h[7], Worker: 1, Span: 8})
	ix.Insert(h, 1) // the whole prefix is recorded block by block now
	if n := ix.Blocks(1); n != 8 {
		t.Fatalf("charged %d blocks, want the chain's 8", n)
	}
}

func TestLearnedChargeIsAtLeastOneAndAtMostTheBudget(t *testing.T) {
	ix := NewIndex(newFakeClock(), 10)
	ix.Learn(Fact{Hash: 1, Worker: 1}) // no span: one block
	if n := ix.Blocks(1); n != 1 {
		t.Fatalf("a fact without span charged %d, want 1", n)
	}
	h := chain("m", 3, "huge")
	ix.Learn(Fact{Hash: h[2], Worker: 1, Span: 1000})
	if n := ix.Blocks(1); n != 10 {
		t.Fatalf("a fact over the budget charged %d, want the budget of 10", n)
	}
	if d, _ := ix.Match(h, NewPool([]*Load{{id: 1}}), nil); d != 2 {
		t.Fatalf("the heavy fact evicted itself: matched depth %d, want 2", d)
	}
}

func TestRecentCarriesTheCharges(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	ix.Insert([]uint64{1}, 1)
	ix.Learn(Fact{Hash: 2, Worker: 1, Span: 12})
	got := ix.Recent(10)
	want := []Fact{{Hash: 2, Worker: 1, Span: 12}, {Hash: 1, Worker: 1, Span: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("Recent = %v, want %v", got, want)
	}
}

// TestAnEngineThatDidNotHoldAHitShrinksItsWorkersBudget: each hit the
// engine did not back takes 5% off the worker's budget, forgetting its
// least recently used facts at once, down to a tenth of its capacity; each
// one it backed gives 1% of the capacity back, up to the capacity.
func TestAnEngineThatDidNotHoldAHitShrinksItsWorkersBudget(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1000)
	hashes := make([]uint64, 1000)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	ix.Insert(hashes, 1)
	ix.Insert(hashes[:10], 2)
	ix.Calibrate(1, false)
	if got := ix.Blocks(1); got != 950 {
		t.Fatalf("after one false hit worker 1 holds %d blocks, want 950", got)
	}
	if got := ix.Blocks(2); got != 10 {
		t.Errorf("worker 2 lost blocks to worker 1's calibration: %d, want 10", got)
	}
	pool := NewPool([]*Load{NewLoadTable(nil).Get(1)})
	if depth, _ := ix.Match(hashes[:1], pool, nil); depth != 0 {
		t.Errorf("the shallowest block, the most recently used, was forgotten")
	}
	for range 100 {
		ix.Calibrate(1, false)
	}
	if got, s := ix.Blocks(1), ix.Scale(1); got != 100 || s != minScale {
		t.Errorf("after 101 false hits: %d blocks at scale %.3f, want 100 at %.1f", got, s, minScale)
	}
	for range 200 {
		ix.Calibrate(1, true)
	}
	if s := ix.Scale(1); s != 1 {
		t.Errorf("after 200 backed hits the scale is %.3f, want 1", s)
	}
	ix.SetBudget(1, 500)
	ix.Calibrate(1, false)
	if got := ix.Blocks(1); got > 475 {
		t.Errorf("a new capacity of 500 then a false hit leaves %d blocks, want at most 475", got)
	}
}

func TestAPrefixForksWhereARecordedRequestWentOnPastIt(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1024)
	c := chain("m", 6, "a conversation")
	ix.Insert(c[:4], 1)
	ix.Learn(Fact{Hash: c[5], Worker: 2, Span: 2})
	for d, want := range []bool{true, true, true, false, false, false} {
		if got := ix.Forks(c[d]); got != want {
			t.Errorf("block %d: forks %v, want %v (recorded 0-3 on one worker, block 5 learned)", d, got, want)
		}
	}
	ix.Insert(c[:6], 3) // the conversation's next turn went on past block 3
	if !ix.Forks(c[3]) {
		t.Error("block 3 does not fork once a request went on past it")
	}
}

// TestALongInsertKeepsItsBlocksInPrefixOrder: a prompt of more blocks than
// Insert records under one round of shard locks, many of them on one
// shard, ends up in its worker's LRU shallowest first, every block but the
// last forking, and a smaller budget keeps exactly a prefix of it.
func TestALongInsertKeepsItsBlocksInPrefixOrder(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1<<16)
	hashes := make([]uint64, 3*insertChunk+17)
	for i := range hashes {
		hashes[i] = uint64(1 + i*indexShards/4) // four blocks a shard, then the next shard
	}
	ix.Insert(hashes[:40], 1) // an earlier, shorter turn: its blocks are known already
	ix.Insert(hashes, 1)
	if got := ix.Blocks(1); got != len(hashes) {
		t.Fatalf("charged %d blocks, want %d", got, len(hashes))
	}
	for i, f := range ix.Recent(len(hashes)) {
		if f.Hash != hashes[i] {
			t.Fatalf("fact %d of the LRU, newest first, is %d, want block %d's hash %d", i, f.Hash, i, hashes[i])
		}
	}
	for i, h := range hashes {
		if got, want := ix.Forks(h), i < len(hashes)-1; got != want {
			t.Fatalf("block %d forks: %v, want %v", i, got, want)
		}
	}
	ix.SetBudget(1, 300)
	pool := NewPool([]*Load{{id: 1}})
	if d, _ := ix.Match(hashes, pool, nil); d != 299 {
		t.Fatalf("after a budget of 300 the deepest block held is %d, want 299", d)
	}
}

// TestAHashTwiceInOneInsertIsOneFact: chained hashes repeat only by
// collision, and then the block is one fact, charged once, as recent as
// its shallower occurrence.
func TestAHashTwiceInOneInsertIsOneFact(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	ix.Insert([]uint64{7, 8, 7, 9}, 1)
	if got := ix.Blocks(1); got != 3 {
		t.Fatalf("charged %d blocks, want 3", got)
	}
	var order []uint64
	for _, f := range ix.Recent(10) {
		order = append(order, f.Hash)
	}
	if !slices.Equal(order, []uint64{7, 8, 9}) {
		t.Fatalf("LRU newest first %v, want [7 8 9]", order)
	}
}

// TestIndexReadersRunBesideWriters runs every reader of the facts' stamps
// and marks beside the writers, for the race detector: a fact's stamp and
// its forks mark are plain fields, written with both the owner's and the
// shard's lock held.
func TestIndexReadersRunBesideWriters(t *testing.T) {
	clock := newFakeClock()
	ix := NewIndex(clock, 500)
	hashes := chain("m", 300, "shared")
	pool := NewPool([]*Load{{id: 1}, {id: 2}})
	all, recent := make([]int, 2), make([]int, 2)
	var wg sync.WaitGroup
	for w := WorkerID(1); w <= 2; w++ {
		wg.Go(func() {
			for i := range 50 {
				ix.Insert(hashes[:100+4*i], w)
				ix.Learn(Fact{Hash: hashes[i], Worker: w, Span: 3})
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			ix.Depths(hashes, pool, time.Unix(0, 0), all, recent)
			ix.Forks(hashes[10])
			ix.Expire(time.Unix(0, 0))
		}
	})
	wg.Wait()
	if d, _ := ix.Match(hashes, pool, nil); d != 295 {
		t.Fatalf("deepest block held %d, want 295", d)
	}
}
