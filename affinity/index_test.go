package affinity

import (
	"fmt"
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

// A fleet whose workers come and go: every removed worker's table is
// dropped with its facts (no table, no shard entry left behind), and its
// tombstone is pruned after goneFor, so the index's size follows the live
// fleet and not every worker it ever had.
func TestRemovedWorkersLeaveNothingBehind(t *testing.T) {
	clock := newFakeClock()
	ix := NewIndex(clock, 100)
	for w := WorkerID(1); w <= 200; w++ {
		ix.Insert(chain("m", 5, fmt.Sprint("w", w)), w)
		ix.Learn(Fact{Hash: uint64(w) << 32, Worker: w, Span: 2})
		ix.SetBudget(w, 50)
		if w > 2 { // two workers stay, the others leave one by one
			ix.RemoveWorker(w - 2)
			ix.Insert(chain("m", 5, "late"), w-2) // a request routed before the removal
			ix.Learn(Fact{Hash: 7, Worker: w - 2})
		}
		clock.Step(10 * time.Second)
	}
	if n := ix.Workers(); n != 2 {
		t.Fatalf("the index keeps %d workers' tables, want the 2 live ones", n)
	}
	if n, want := ix.TotalBlocks(), ix.Blocks(199)+ix.Blocks(200); n != want || want == 0 {
		t.Fatalf("%d blocks in all, want the live workers' %d", n, want)
	}
	facts := 0
	for i := range ix.shards {
		for _, nodes := range ix.shards[i].m {
			for _, n := range nodes {
				if n.worker != 199 && n.worker != 200 {
					t.Fatalf("a fact of removed worker %d is still in the index", n.worker)
				}
				facts++
			}
		}
	}
	if facts == 0 {
		t.Fatal("no fact of the live workers")
	}
	if n, most := ix.Gone(), int(goneFor/(10*time.Second))+1; n > most {
		t.Fatalf("%d tombstones kept, want at most the last %v's %d", n, goneFor, most)
	}
	if n := ix.Blocks(1); n != 0 {
		t.Fatalf("removed worker 1 owns %d blocks", n)
	}
}

// naiveFact is one ownership fact of the reference model.
type naiveFact struct {
	h uint64
	w WorkerID
}

// naiveUse is a fact's last use and the blocks it is charged; for one
// recorded by Insert, its depth in the chain and the generation of the fact
// before it there (parent, -1: none). A generation names one life of a
// fact: a fact evicted and recorded again is another.
type naiveUse struct {
	tick, weight int
	inserted     bool
	gen, depth   int
	parent       int
}

// naiveTrim evicts w's least recently used facts until the blocks charged
// to w fit budget; the last one, charged for more than the excess, loses
// the excess only.
func naiveTrim(facts map[naiveFact]naiveUse, w WorkerID, budget int) {
	for over := naiveCharged(facts, w) - budget; over > 0; over = naiveCharged(facts, w) - budget {
		oldest, oldestTick := naiveFact{}, -1
		for k, u := range facts {
			if k.w == w && (oldestTick < 0 || u.tick < oldestTick) {
				oldest, oldestTick = k, u.tick
			}
		}
		if u := facts[oldest]; u.weight > over { // a stretch loses its deepest blocks only
			u.weight -= over
			facts[oldest] = u
			return
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
	gens := 0
	life := func(f naiveFact) int { // the fact's generation, a new one if it is not held
		if u, ok := naive[f]; ok {
			return u.gen
		}
		gens++
		return gens
	}
	for range 3000 {
		c, w := chains[rng.IntN(len(chains))], WorkerID(1+rng.IntN(3))
		switch rng.IntN(4) {
		case 0, 1:
			ix.Insert(c, w)
			g := make([]int, len(c))
			for i := range c {
				g[i] = life(naiveFact{c[i], w})
			}
			for i := len(c) - 1; i >= 0; i-- {
				tick++
				parent := -1
				if i > 0 {
					parent = g[i-1]
				}
				naive[naiveFact{c[i], w}] = naiveUse{tick: tick, weight: 1, inserted: true, gen: g[i], depth: i, parent: parent}
			}
			naiveTrim(naive, w, budget)
		case 2:
			at := rng.IntN(len(c))
			h, span := c[at], uint32(rng.IntN(60))
			if rng.IntN(4) == 0 {
				span = SpanSuperseded
			}
			ix.Learn(Fact{Hash: h, Worker: w, Span: span})
			naiveLearn(naive, c, at, w, span, budget, &tick, life)
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

// naiveLearn is Learn of a peer's fact for block at of chain c: a learned
// fact is charged its span; a recorded one keeps its charge of 1 and, for a
// span, makes the recorded blocks before it within the span the newest,
// charging it for those it no longer holds; superseded, it drops the
// recorded blocks between it and the last checkpoint below it.
func naiveLearn(naive map[naiveFact]naiveUse, c []uint64, at int, w WorkerID, span uint32, budget int, tick *int, life func(naiveFact) int) {
	f := naiveFact{c[at], w}
	u, held := naive[f]
	*tick++
	if !held || !u.inserted {
		naive[f] = naiveUse{tick: *tick, weight: min(max(int(span), 1), budget), gen: life(f), parent: -1}
		return
	}
	u.tick, u.weight = *tick, 1
	// ancestor k of the fact while the chain of links holds: recorded, and
	// the life the link was made with.
	ancestor := func(k, want int) (naiveFact, naiveUse, bool) {
		if at-k < 0 || want < 0 {
			return naiveFact{}, naiveUse{}, false
		}
		a := naiveFact{c[at-k], w}
		au, ok := naive[a]
		return a, au, ok && au.inserted && au.gen == want
	}
	if span == SpanSuperseded {
		last := LastCheckpointBelow(u.depth)
		for k, want := 1, u.parent; ; k++ {
			a, au, ok := ancestor(k, want)
			if !ok || au.depth <= last {
				break
			}
			delete(naive, a)
			want = au.parent
		}
		u.parent = -1
		naive[f] = u
		return
	}
	n, want := int(span)-1, u.parent
	for k := 1; k <= n; k++ {
		a, au, ok := ancestor(k, want)
		if !ok {
			u.weight += n - k + 1
			break
		}
		*tick++
		want, au.tick = au.parent, *tick
		naive[a] = au
	}
	naive[f] = u
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
		if got := ix.Forks(c[d], d); got != want {
			t.Errorf("block %d: forks %v, want %v (recorded 0-3 on one worker, block 5 learned)", d, got, want)
		}
	}
	ix.Insert(c[:6], 3) // the conversation's next turn went on past block 3
	if !ix.Forks(c[3], 3) {
		t.Error("block 3 does not fork once a request went on past it")
	}
}

// TestAPrefixForksAtAPeersCheckpoint: a peer announces its decision's
// deepest block and the checkpoints below it, so a learned fact at a
// checkpoint's depth ends a prefix the peer's request went on past, and
// one at any other depth ends the peer's request.
func TestAPrefixForksAtAPeersCheckpoint(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1024)
	c := chain("m", 11, "a peer's first turn")
	for _, d := range []int{0, 1, 3, 7, 10} { // what the peer announces of an 11-block prompt
		ix.Learn(Fact{Hash: c[d], Worker: 2, Span: 1})
	}
	for _, d := range []int{0, 1, 3, 7} {
		if !ix.Forks(c[d], d) {
			t.Errorf("the peer's checkpoint at block %d does not fork", d)
		}
	}
	if ix.Forks(c[10], 10) {
		t.Error("the peer's deepest block forks: its request ended there")
	}
	ix.Insert(c[:8], 1) // a request recorded here ended at block 7
	if !ix.Forks(c[7], 7) {
		t.Error("block 7 no longer forks once a request here ended there: the peer's went on past it")
	}
	d := chain("m", 8, "recorded here")
	ix.Insert(d, 1)
	if ix.Forks(d[7], 7) {
		t.Error("a checkpoint's depth that only a request recorded here reached, and ended at, forks")
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
		if got, want := ix.Forks(h, i), i < len(hashes)-1; got != want {
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
			ix.Forks(hashes[10], 10)
			ix.Expire(time.Unix(0, 0))
		}
	})
	wg.Wait()
	if d, _ := ix.Match(hashes, pool, nil); d != 295 {
		t.Fatalf("deepest block held %d, want 295", d)
	}
}

// held reports whether the index holds block h for worker w.
func held(ix *Index, h uint64, w WorkerID) bool {
	_, ok := ix.Inserted(h, w)
	return ok
}

// TestAPeersCheckpointKeepsTheBlocksBeforeItThatThisReplicaRecorded: a
// checkpoint a peer announces for a conversation this replica recorded
// (its own decision of an earlier turn) says the peer's decision used the
// blocks of its span as well: they stay as recent as the checkpoint, so
// the budget's pressure takes older conversations' blocks first, as the
// engine's LRU does, and the checkpoint's stretch is not left charged 1.
func TestAPeersCheckpointKeepsTheBlocksBeforeItThatThisReplicaRecorded(t *testing.T) {
	ix := NewIndex(newFakeClock(), 64)
	live, older := chain("m", 32, "live"), chain("m", 32, "older")
	ix.Insert(live, 1)
	ix.Insert(older, 1) // now live is the older one
	ix.Learn(Fact{Hash: live[31], Worker: 1, Span: 16})
	ix.Insert(chain("m", 24, "new"), 1) // 24 blocks over the budget
	for i := 16; i < 32; i++ {
		if !held(ix, live[i], 1) {
			t.Fatalf("block %d of the conversation the peer just used was evicted", i)
		}
	}
	if held(ix, older[31], 1) {
		t.Fatal("the deepest block of the conversation nobody used since is still held")
	}
	if n := ix.Blocks(1); n != 64 {
		t.Fatalf("charged %d blocks, want the budget of 64", n)
	}
}

// TestAPeersCheckpointIsChargedTheBlocksBeforeItThisReplicaNoLongerHolds:
// where the blocks this replica recorded before a checkpoint aged out
// alone, the checkpoint a peer announces again is charged for them: the
// engine holds them, the peer's decision just used them.
func TestAPeersCheckpointIsChargedTheBlocksBeforeItThisReplicaNoLongerHolds(t *testing.T) {
	ix := NewIndex(newFakeClock(), 40)
	conv := chain("m", 32, "conv")
	ix.Insert(conv, 1)
	ix.Learn(Fact{Hash: conv[31], Worker: 1, Span: 1}) // the deepest block alone made recent
	ix.Insert(chain("m", 24, "other"), 1)              // 16 over: the oldest 16 blocks go
	if held(ix, conv[15], 1) || !held(ix, conv[14], 1) {
		t.Fatalf("setup: block 15 held %v, block 14 held %v", held(ix, conv[15], 1), held(ix, conv[14], 1))
	}
	ix.SetBudget(1, 100) // room for the charge to show
	before := ix.Blocks(1)
	ix.Learn(Fact{Hash: conv[31], Worker: 1, Span: 16})
	// Blocks 16..30 are gone: conv[31] stands for them again, 1 + 15.
	if got := ix.Blocks(1) - before; got != 15 {
		t.Fatalf("the checkpoint's charge grew by %d, want 15 for the blocks no longer held", got)
	}
}

// TestASupersededFactDropsTheStretchADeeperFactStandsFor: a peer's hit
// that continued a conversation this replica recorded announces the
// earlier deepest block as superseded and a deeper fact whose span runs
// back to the last checkpoint: the blocks this replica recorded in that
// stretch are dropped, so the conversation is charged once, as the engine
// holds it, and not twice until those blocks age out.
func TestASupersededFactDropsTheStretchADeeperFactStandsFor(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1000)
	turn := chain("m", 100, "conv")
	ix.Insert(turn, 1)
	next := chain("m", 120, "conv") // the same text, longer: the next turn
	ix.Learn(Fact{Hash: turn[99], Worker: 1, Span: SpanSuperseded})
	ix.Learn(Fact{Hash: next[119], Worker: 1, Span: 120 - 64})
	if n := ix.Blocks(1); n != 64+1+56 {
		t.Fatalf("charged %d blocks, want 121: the 64 to the last checkpoint, the superseded block, the deeper fact's 56", n)
	}
	for i, want := range map[int]bool{63: true, 64: false, 98: false, 99: true} {
		if got := held(ix, turn[i], 1); got != want {
			t.Errorf("block %d held %v, want %v", i, got, want)
		}
	}
	if d, _ := ix.Match(next, NewPool([]*Load{{id: 1}}), nil); d != 119 {
		t.Fatalf("the next turn matched to depth %d, want 119", d)
	}
}

// TestAPeersCheckpointRefreshesAcrossInsertChunks: a chain longer than one
// insert chunk links its blocks across the chunks' seam.
func TestAPeersCheckpointRefreshesAcrossInsertChunks(t *testing.T) {
	ix := NewIndex(newFakeClock(), 1<<16)
	conv := make([]uint64, insertChunk+100) // chunks [100, 356) and [0, 100)
	for i := range conv {
		conv[i] = uint64(1000 + i)
	}
	ix.Insert(conv, 1)
	ix.Insert([]uint64{1}, 1)
	ix.Learn(Fact{Hash: conv[127], Worker: 1, Span: 64}) // blocks 64..127, across the seam at 100
	var order []uint64
	for _, f := range ix.Recent(65) {
		order = append(order, f.Hash)
	}
	if want := conv[64:128]; !slices.Equal(order[:64], want) {
		t.Fatalf("newest first %v, want blocks 64..127 %v", order[:64], want)
	}
	if order[64] != 1 {
		t.Fatalf("after the checkpoint's stretch came %d, want the block inserted before", order[64])
	}
}

// TestAStretchAtTheTailLosesOnlyTheExcess: a learned fact standing for 30
// blocks at the tail of the LRU, 10 blocks over the budget, keeps standing
// for 20: the engine gives up the deepest 10 blocks of that prefix, not all
// of it.
func TestAStretchAtTheTailLosesOnlyTheExcess(t *testing.T) {
	ix := NewIndex(newFakeClock(), 40)
	learned := chain("m", 30, "learned")
	ix.Learn(Fact{Hash: learned[29], Worker: 1, Span: 30})
	ix.Insert(chain("m", 20, "new"), 1)
	if n := ix.Blocks(1); n != 40 {
		t.Fatalf("charged %d blocks, want the budget of 40", n)
	}
	if d, _ := ix.Match(learned, NewPool([]*Load{{id: 1}}), nil); d != 29 {
		t.Fatalf("the learned prefix matched to depth %d, want 29: 20 of its 30 blocks are still charged", d)
	}
	ix.Insert(chain("m", 20, "newer"), 1) // 20 over: the 20 left go, and the fact with them
	if d, _ := ix.Match(learned, NewPool([]*Load{{id: 1}}), nil); d != -1 {
		t.Fatalf("the learned prefix matched to depth %d after its last blocks were evicted", d)
	}
}

// TestContinuesNamesTheWorkerOfAnEarlierTurnNotOfASharedPrefix: a prompt
// that goes on past an earlier turn a peer sent to worker 3 continues it
// there; one that goes on past a prefix this replica's own requests went on
// past (a shared system prompt) continues nothing, nor does the earlier
// turn itself, nor a prompt the index knows nothing of.
func TestContinuesNamesTheWorkerOfAnEarlierTurnNotOfASharedPrefix(t *testing.T) {
	ix := NewIndex(newFakeClock(), 100)
	pool := NewPool([]*Load{{id: 2}, {id: 3}, {id: 5}})
	turn := chain("m", 20, "conv")
	ix.Learn(Fact{Hash: turn[11], Worker: 5, Span: 12})
	ix.Learn(Fact{Hash: turn[11], Worker: 3, Span: 12})
	if w, ok := ix.Continues(turn, pool); !ok || w != 3 {
		t.Fatalf("the next turn continues %d (%v), want worker 3", w, ok)
	}
	if _, ok := ix.Continues(turn[:12], pool); ok {
		t.Fatal("the earlier turn itself continues something")
	}
	shared := chain("m", 8, "system")
	ix.Insert(append(shared[:6:6], chain("m", 2, "one session")...), 2)
	if _, ok := ix.Continues(append(shared[:6:6], chain("m", 3, "another")...), pool); ok {
		t.Fatal("a prompt past a prefix other requests went on past continues a turn")
	}
	if _, ok := ix.Continues(chain("m", 4, "new"), pool); ok {
		t.Fatal("a prompt the index knows nothing of continues a turn")
	}
}
