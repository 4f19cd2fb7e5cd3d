package affinity

import (
	"fmt"
	"testing"
)

// TestAMissGoesToTheWorkerWithTheLeastPrefillBacklog: under least_prefill
// a miss goes where the least uncached prompt waits, even to a worker with
// more requests (within the bound), where least_load would take the fewest.
func TestAMissGoesToTheWorkerWithTheLeastPrefillBacklog(t *testing.T) {
	f := newFleet(t, 3, Settings{MissPlacement: PlaceLeastPrefill})
	// A long cold prompt on two workers, then two short ones, which the
	// backlog puts together on the third.
	for _, s := range []string{text("a", 4000), text("b", 4000)} {
		f.hold(t, s)
	}
	short, _ := f.hold(t, text("c", 40))
	if d, _ := f.hold(t, text("d", 40)); d.Worker != short.Worker {
		t.Fatalf("second short prompt went to worker %d, want %d with 40 bytes queued", d.Worker, short.Worker)
	}
	l := f.loads.Get(short.Worker)
	if l.Local() != 2 || l.Backlog() != 80 {
		t.Fatalf("worker %d: %d requests, %d bytes queued; want 2 and 80", short.Worker, l.Local(), l.Backlog())
	}
	if d := f.route(t, text("new", 100)); d.Worker != short.Worker {
		t.Fatalf("miss went to worker %d (1 request, 4000 bytes queued), want %d (2 requests, 80 bytes)", d.Worker, short.Worker)
	}
}

// TestTheBacklogDoesNotOutweighTheCountOfRequests: a worker with no
// backlog but HotLoad requests more than the least loaded is passed over
// (its requests are decoding, and a count that far above the rest is
// what balance is for).
func TestTheBacklogDoesNotOutweighTheCountOfRequests(t *testing.T) {
	f := newFleet(t, 2, Settings{MissPlacement: PlaceLeastPrefill})
	d, _ := f.hold(t, text("long", 4000)) // backlog on one worker
	busy := WorkerID(3 - d.Worker)        // the other: no backlog
	f.setLoad(busy, int64(DefaultHotLoad)+1)
	if got := f.route(t, text("new", 100)).Worker; got == busy {
		t.Fatalf("miss went to worker %d, %d requests above the other", got, DefaultHotLoad+1)
	}
	f.setLoad(busy, int64(DefaultHotLoad)-1) // within the bound: the backlog decides
	if got := f.route(t, text("new2", 100)).Worker; got != busy {
		t.Fatalf("miss went to worker %d with a backlog, want %d without", got, busy)
	}
}

// TestAHitIsChargedOnlyTheTextItsWorkerDoesNotHold: the backlog of a hit
// is the unmatched rest of its prompt, of a miss the whole prompt.
func TestAHitIsChargedOnlyTheTextItsWorkerDoesNotHold(t *testing.T) {
	f := newFleet(t, 2, Settings{MissPlacement: PlaceLeastPrefill})
	first := text("conversation", 800)
	f.route(t, first)
	d, g := f.hold(t, first+text("more", 200))
	if !d.Hit {
		t.Fatalf("the continuation missed: %+v", d)
	}
	if want := int64(d.Total - d.Matched); g.backlog != want || f.loads.Get(d.Worker).Backlog() != want {
		t.Fatalf("hit charged %d (worker %d), want the unmatched %d", g.backlog, f.loads.Get(d.Worker).Backlog(), want)
	}
	g.Release()
	d, g = f.hold(t, text("cold", 300))
	if d.Hit || g.backlog != 300 {
		t.Fatalf("miss charged %d, want the whole 300", g.backlog)
	}
	g.Release()
}

// TestTheBacklogIsTakenBackOnceAtTheFirstTokenOrAtTheRelease: Prefilled
// and Release each give the backlog back, together only once, whatever the
// order; the count goes back with Release alone.
func TestTheBacklogIsTakenBackOnceAtTheFirstTokenOrAtTheRelease(t *testing.T) {
	f := newFleet(t, 1, Settings{MissPlacement: PlaceLeastPrefill})
	l := f.loads.Get(1)
	_, g := f.hold(t, text("x", 500))
	if l.Backlog() != 500 || l.Local() != 1 {
		t.Fatalf("backlog %d local %d after the decision, want 500 and 1", l.Backlog(), l.Local())
	}
	g.Prefilled()
	g.Prefilled()
	if l.Backlog() != 0 || l.Local() != 1 {
		t.Fatalf("backlog %d local %d after the first token, want 0 and 1", l.Backlog(), l.Local())
	}
	g.Release()
	_, g2 := f.hold(t, text("y", 300)) // a request that ends without a first token
	g2.Release()
	g2.Prefilled()
	if l.Backlog() != 0 || l.Local() != 0 {
		t.Fatalf("backlog %d local %d after the releases, want 0", l.Backlog(), l.Local())
	}
	var none *Guard
	none.Prefilled() // a request that never had a guard
}

// TestPeersBacklogsCountInThePlacement: the merged backlog, own and the
// peers', decides, as the merged count does.
func TestPeersBacklogsCountInThePlacement(t *testing.T) {
	f := newFleet(t, 2, Settings{MissPlacement: PlaceLeastPrefill})
	f.loads.Get(1).SetRemoteBacklog(10_000)
	for i := range 4 { // least_load would take turns
		if got := f.route(t, text(fmt.Sprint("new", i), 100)).Worker; got != 2 {
			t.Fatalf("miss %d went to worker %d, whose peers report 10000 bytes queued", i, got)
		}
	}
	if m := f.loads.Get(1).MergedBacklog(); m != 10_000 {
		t.Fatalf("merged backlog %d, want the peers' 10000", m)
	}
}
