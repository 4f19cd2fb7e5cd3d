package affinity

import (
	"strings"
	"testing"
)

// newFleetWithBlock is newFleet with the production block size and an index
// budget of budget blocks per worker.
func newFleetWithBlock(t *testing.T, n, budget int) *fleet {
	t.Helper()
	f := &fleet{loads: NewLoadTable(nil), clock: newFakeClock()}
	f.index = NewIndex(f.clock, budget)
	var members []*Load
	for i := 1; i <= n; i++ {
		members = append(members, f.loads.Get(WorkerID(i)))
	}
	f.pool = NewPool(members)
	p, err := NewPolicy(Settings{Policy: PolicyCacheAware, MissPlacement: PlaceLeastLoad,
		Thresholds: DefaultThresholds(), BlockSize: DefaultBlockSize}, f.index)
	if err != nil {
		t.Fatal(err)
	}
	f.router = NewRouter(p, f.loads, f.index, DefaultBlockSize, nil)
	return f
}

// TestAPromptShorterThanABlockKeepsItsWorker: the same 186-byte prompt goes
// to one worker, as a hit, though no full block of it exists; another short
// prompt is not taken for it.
func TestAPromptShorterThanABlockKeepsItsWorker(t *testing.T) {
	f := newFleetWithBlock(t, 3, 1024)
	prompt := text("a short prompt", 186)
	first := f.route(t, prompt)
	for i := range 3 {
		f.setLoad(first.Worker, int64(2+i)) // busier than the others, not overloaded
		d := f.route(t, prompt)
		if d.Worker != first.Worker || !d.Hit || d.Matched != len(prompt) {
			t.Fatalf("repeat %d went to %d (hit %v, matched %d of %d), want worker %d as a hit",
				i, d.Worker, d.Hit, d.Matched, len(prompt), first.Worker)
		}
	}
	if d := f.route(t, text("another short one", 186)); d.Hit {
		t.Fatalf("a different short prompt hit %+v", d)
	}
}

// TestALongerPromptIsMatchedByItsFullBlocks: a prompt of one full block and
// a partial one hits on its full block (more than half of it) and hashes no
// tail; its full blocks match a continuation.
func TestALongerPromptIsMatchedByItsFullBlocks(t *testing.T) {
	f := newFleetWithBlock(t, 4, 1024)
	prompt := text("conversation", DefaultBlockSize+DefaultBlockSize-1)
	if n := len(f.router.Prepare("m", []byte(prompt), 0).Hashes); n != 1 {
		t.Fatalf("%d hashes for one full block and a partial one, want 1", n)
	}
	owner := f.route(t, prompt).Worker
	f.setLoad(owner, 3)
	if d := f.route(t, prompt); d.Worker != owner || !d.Hit {
		t.Fatalf("same prompt: %+v, want worker %d as a hit", d, owner)
	}
	prompt = text("conversation", 2*DefaultBlockSize+100)
	f.route(t, prompt)
	longer := prompt + text("next turn", 300)
	if d := f.route(t, longer); d.Worker != owner || d.Matched != 2*DefaultBlockSize {
		t.Fatalf("continuation: %+v, want worker %d with the 2 full blocks matched", d, owner)
	}
}

// TestHashingStopsAtTheLargestBudget: a 512 MiB prompt is hashed only as far
// as a worker's budget holds (the zeroed pages beyond are never touched),
// so routing it inserts a budget's worth of blocks, not two million.
func TestHashingStopsAtTheLargestBudget(t *testing.T) {
	const budget = 4096
	f := newFleetWithBlock(t, 2, budget)
	huge := make([]byte, 512<<20)
	req := f.router.Prepare("m", huge, 0)
	if len(req.Hashes) != budget || req.Full != budget {
		t.Fatalf("%d hashes (%d full) for a 512 MiB prompt, want the budget of %d", len(req.Hashes), req.Full, budget)
	}
	d, g, err := f.router.Route(req, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if n := f.index.Blocks(d.Worker); n != budget {
		t.Fatalf("worker charged %d blocks, want %d", n, budget)
	}
	f.index.SetBudget(2, 2*budget) // a worker that reports a larger cache
	if n := len(f.router.Prepare("m", huge, 0).Hashes); n != 2*budget {
		t.Fatalf("%d hashes after a larger budget, want %d", n, 2*budget)
	}
}

// A policy that keeps no index (least_load, round_robin) is given a router
// without one: preparing a request must still hash it, bounded by what the
// gossip could carry, not fail on the missing index.
func TestARouterWithoutAnIndexPreparesRequests(t *testing.T) {
	r := NewRouter(LeastLoad{}, NewLoadTable(nil), nil, DefaultBlockSize, nil)
	req := r.Prepare("m", []byte(strings.Repeat("x", 4*DefaultBlockSize)), 0)
	if len(req.Hashes) == 0 {
		t.Fatal("no hashes for a four-block prompt")
	}
}
