package affinity

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// loraFleet is a fleet whose router places adapter requests by a residency
// table on the fleet's clock.
func loraFleet(t *testing.T, n int, s Settings) (*fleet, *Adapters) {
	t.Helper()
	f := newFleet(t, n, s)
	a := NewAdapters(f.clock, 0)
	th := s.Thresholds
	if th == (Thresholds{}) {
		th = DefaultThresholds()
	}
	f.router.PlaceAdapters(a, th)
	return f, a
}

// holdAdapter routes a request of adapter name and keeps it in flight.
func (f *fleet) holdAdapter(t *testing.T, name, prompt string) (Decision, *Guard) {
	t.Helper()
	req := f.router.PrepareFor(CacheID{Model: name}, Text{[]byte(prompt)}, 0)
	req.Adapter = AdapterKeyOf(name)
	d, g, err := f.router.Route(req, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

func (f *fleet) routeAdapter(t *testing.T, name, prompt string) Decision {
	t.Helper()
	d, g := f.holdAdapter(t, name, prompt)
	g.Release()
	return d
}

// seenOn says that the engine of w ran adapters lately, the first most
// recently, in slots slots.
func seenOn(a *Adapters, clk interface{ Now() time.Time }, w WorkerID, slots int, busy bool, names ...string) {
	v := AdapterView{Slots: slots}
	for i, n := range names {
		s := AdapterSeen{Key: AdapterKeyOf(n), Last: clk.Now().Add(-time.Duration(i+1) * time.Second)}
		if busy {
			s.BusyUntil = clk.Now().Add(time.Minute)
		}
		v.Seen = append(v.Seen, s)
	}
	a.SetView(w, v)
}

// rendezvousFirst is the first worker of 1..n in the rendezvous order of
// adapter name, and the one after it.
func rendezvousFirst(name string, n int) (first, second WorkerID) {
	ids := make([]WorkerID, n)
	for i := range ids {
		ids[i] = WorkerID(i + 1)
	}
	k := uint64(AdapterKeyOf(name))
	slices.SortFunc(ids, func(a, b WorkerID) int {
		sa, sb := rendezvousScore(k, a), rendezvousScore(k, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return ids[0], ids[1]
}

func TestAnAdapterGoesWhereItIsResident(t *testing.T) {
	for _, policy := range []string{PolicyCacheAware, PolicyLeastLoad} {
		t.Run(policy, func(t *testing.T) {
			f, a := loraFleet(t, 4, Settings{Policy: policy})
			seenOn(a, f.clock, 3, 2, false, "sql-lora", "chat-lora")
			f.setLoad(3, 20) // busier than the others, far from overloaded
			for i := range 5 {
				if d := f.routeAdapter(t, "sql-lora", text(fmt.Sprint("q", i), 64)); d.Worker != 3 {
					t.Fatalf("request %d went to %d, want 3 where sql-lora is resident", i, d.Worker)
				}
			}
		})
	}
}

func TestAnAdapterLeavesAnOverloadedResidentWorker(t *testing.T) {
	f, a := loraFleet(t, 4, Settings{})
	seenOn(a, f.clock, 3, 2, false, "sql-lora")
	f.setLoad(3, 200) // 200 - 0 > 64 and 200 > 0 x 1.5
	if d := f.routeAdapter(t, "sql-lora", text("q", 64)); d.Worker == 3 {
		t.Fatalf("went to the overloaded resident worker 3")
	}
}

func TestABaseModelRequestIgnoresResidency(t *testing.T) {
	f, a := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	seenOn(a, f.clock, 3, 2, false, "sql-lora")
	for w := WorkerID(1); w <= 4; w++ {
		f.setLoad(w, 5)
	}
	f.setLoad(1, 0)
	if d := f.route(t, text("q", 64)); d.Worker != 1 {
		t.Fatalf("a base-model request went to %d, want the least loaded, 1", d.Worker)
	}
}

func TestReplicasOfATierPlaceANewAdapterOnOneWorker(t *testing.T) {
	// Two replicas of a tier that know nothing of each other place a new
	// adapter's first requests, of prompts of their own, on the same
	// worker, the first of its rendezvous order; its next requests follow
	// it there.
	first, _ := rendezvousFirst("new-lora", 6)
	for r := range 2 {
		f, _ := loraFleet(t, 6, Settings{Policy: PolicyCacheAware})
		f.loads.SetPeerShare(1, 100*time.Millisecond, f.clock)
		f.setLoad(first, 3) // not the least loaded, within the hot bound
		d, g := f.holdAdapter(t, "new-lora", text(fmt.Sprint("replica", r), 64))
		if d.Worker != first {
			t.Fatalf("replica %d placed new-lora on %d, want %d, the first in its rendezvous order", r, d.Worker, first)
		}
		if again := f.routeAdapter(t, "new-lora", text("next", 64)); again.Worker != first {
			t.Fatalf("the next request went to %d while the first is in flight on %d", again.Worker, first)
		}
		g.Release()
	}
}

func TestAReplicaAlonePlacesANewAdapterByItsPolicy(t *testing.T) {
	f, _ := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	for w := WorkerID(1); w <= 4; w++ {
		f.setLoad(w, 5)
	}
	f.setLoad(3, 0)
	if d := f.routeAdapter(t, "new-lora", text("q", 64)); d.Worker != 3 {
		t.Fatalf("went to %d, want the least loaded, 3", d.Worker)
	}
}

func TestANewAdapterAvoidsAWorkerWhoseSlotsAreBusyWithOthers(t *testing.T) {
	f, a := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	seenOn(a, f.clock, 2, 2, true, "a-lora", "b-lora") // both slots run others now
	for w := WorkerID(1); w <= 4; w++ {
		f.setLoad(w, 3)
	}
	f.setLoad(2, 0) // the least loaded, but its slots are taken
	if d := f.routeAdapter(t, "new-lora", text("q", 64)); d.Worker == 2 {
		t.Fatalf("went to 2, whose two slots are busy with others")
	}
	// When every worker's slots are busy, it still goes somewhere: the
	// least loaded.
	for w := WorkerID(1); w <= 4; w++ {
		seenOn(a, f.clock, w, 2, true, "a-lora", "b-lora")
	}
	if d := f.routeAdapter(t, "new-lora", text("q", 64)); d.Worker != 2 {
		t.Fatalf("with no room anywhere went to %d, want the least loaded, 2", d.Worker)
	}
}

func TestThisReplicasOwnRequestsFillSlots(t *testing.T) {
	// With max_lora 1, a worker running one adapter of this replica's has
	// no room for another: a new adapter goes elsewhere, though no engine
	// reading has shown the first yet.
	first, second := rendezvousFirst("b-lora", 4)
	f, a := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	for w := WorkerID(1); w <= 4; w++ {
		a.SetView(w, AdapterView{Slots: 1})
	}
	// Put a-lora on b-lora's first worker: make the others look busy.
	for w := WorkerID(1); w <= 4; w++ {
		if w != first {
			seenOn(a, f.clock, w, 1, true, "z-lora")
		}
	}
	d, g := f.holdAdapter(t, "a-lora", text("a", 64))
	defer g.Release()
	if d.Worker != first {
		t.Fatalf("setup: a-lora went to %d, want %d", d.Worker, first)
	}
	for w := WorkerID(1); w <= 4; w++ {
		if w != first {
			a.SetView(w, AdapterView{Slots: 1})
		}
	}
	if d := f.routeAdapter(t, "b-lora", text("b", 64)); d.Worker == first {
		t.Fatalf("b-lora went to %d, whose one slot runs a-lora (want %d)", d.Worker, second)
	}
}

func TestAnAdapterDisplacedByOthersIsNoLongerResident(t *testing.T) {
	// With 2 slots, an adapter after which two others ran has been swapped
	// out (the engine evicts the least recently used).
	f, a := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	a.SetView(3, AdapterView{Slots: 2, Seen: []AdapterSeen{
		{Key: AdapterKeyOf("new-1"), Last: f.clock.Now().Add(-time.Second)},
		{Key: AdapterKeyOf("new-2"), Last: f.clock.Now().Add(-2 * time.Second)},
		{Key: AdapterKeyOf("old"), Last: f.clock.Now().Add(-3 * time.Second)},
	}})
	f.setLoad(3, 0) // the least loaded
	for w := WorkerID(1); w <= 4; w++ {
		if w != 3 {
			f.setLoad(w, 1)
		}
	}
	if d := f.routeAdapter(t, "old", text("q", 64)); d.Worker == 3 {
		t.Fatalf("old went to 3, where two adapters ran since it and its slots serve them")
	}
	if d2 := f.routeAdapter(t, "new-2", text("q", 64)); d2.Worker != 3 {
		t.Fatalf("new-2 went to %d, want 3 where it is resident", d2.Worker)
	}
}

func TestAHotAdapterGainsTheNextWorkerInItsRendezvousOrder(t *testing.T) {
	th := DefaultThresholds()
	f, a := loraFleet(t, 6, Settings{Policy: PolicyLeastLoad, Thresholds: th})
	first, second := rendezvousFirst("hot-lora", 6)
	third := WorkerID(0)
	for w := WorkerID(1); w <= 6; w++ {
		if w != first && w != second {
			third = w
			break
		}
	}
	// The adapter is resident on third alone; its requests pile up there.
	seenOn(a, f.clock, third, 2, false, "hot-lora")
	var guards []*Guard
	defer func() {
		for _, g := range guards {
			g.Release()
		}
	}()
	spread := map[WorkerID]int{}
	for i := range 3 * int(th.HotLoad) {
		d, g := f.holdAdapter(t, "hot-lora", text(fmt.Sprint("q", i), 64))
		guards = append(guards, g)
		spread[d.Worker]++
	}
	if len(spread) < 2 || spread[third] == 0 || spread[first] == 0 {
		t.Fatalf("a hot adapter's requests went to %v: want its resident worker %d and then %d, the first of its rendezvous order", spread, third, first)
	}
	for w := range spread {
		if w != third && w != first && w != second {
			t.Fatalf("requests went to %d, outside the rendezvous order's first workers: %v", w, spread)
		}
	}
}

func TestAColdAdapterDoesNotSpread(t *testing.T) {
	// A resident worker busy with other work, for an adapter that had few
	// requests lately, keeps the adapter.
	f, a := loraFleet(t, 6, Settings{Policy: PolicyLeastLoad})
	seenOn(a, f.clock, 4, 2, false, "cold-lora")
	f.setLoad(4, 40) // hot bound passed, balance threshold not
	for i := range 3 {
		f.clock.Step(time.Second) // one request a second: never hot
		if d := f.routeAdapter(t, "cold-lora", text(fmt.Sprint("q", i), 64)); d.Worker != 4 {
			t.Fatalf("request %d went to %d, want the resident worker 4", i, d.Worker)
		}
	}
}

func TestAnAdaptersRequestsInFlightAreCountedAndReleasedOnce(t *testing.T) {
	f, a := loraFleet(t, 2, Settings{Policy: PolicyLeastLoad})
	d, g := f.holdAdapter(t, "a-lora", text("q", 64))
	inflight := func() (n int64) {
		a.EachOwn(func(u OwnUse) {
			if u.Worker == d.Worker && u.Key == AdapterKeyOf("a-lora") {
				n += u.InFlight
			}
		})
		return n
	}
	if n := inflight(); n != 1 {
		t.Fatalf("in flight %d, want 1", n)
	}
	f.clock.Step(time.Second)
	g.Release()
	g.Release()
	if n := inflight(); n != 0 {
		t.Fatalf("in flight %d after release, want 0", n)
	}
	var last time.Time
	a.EachOwn(func(u OwnUse) { last = u.Last })
	if !last.Equal(f.clock.Now()) {
		t.Fatalf("last active %v, want the release's %v", last, f.clock.Now())
	}
}

func TestTheTableIsBoundedInBytes(t *testing.T) {
	clk := newFakeClock()
	a := NewAdapters(clk, adapterWorkerBytes+3*adapterUseBytes)
	loads := NewLoadTable(nil)
	for i := range 10 {
		if u := a.use(1, AdapterKey(i+1)); u != nil {
			g := loads.Acquire(loads.Get(1))
			u.acquire()
			g.adapter = u
			defer g.Release()
		}
	}
	if b := a.Bytes(); b > adapterWorkerBytes+3*adapterUseBytes {
		t.Fatalf("%d bytes, over the bound", b)
	}
	n := 0
	a.EachOwn(func(OwnUse) { n++ })
	if n != 3 {
		t.Fatalf("%d uses kept, want 3 within the bound", n)
	}
	a.Forget(1)
	if b := a.Bytes(); b != 0 {
		t.Fatalf("%d bytes after the worker went, want 0", b)
	}
}

func TestAWorkersUsesAreBoundedByNumber(t *testing.T) {
	clk := newFakeClock()
	a := NewAdapters(clk, 0)
	for i := range 3 * MaxAdaptersPerWorker {
		clk.Step(time.Millisecond)
		if u := a.use(1, AdapterKey(i+1)); u != nil {
			u.acquire()
			u.release()
		}
	}
	n := 0
	a.EachOwn(func(u OwnUse) {
		n++
		if u.Key <= AdapterKey(2*MaxAdaptersPerWorker) {
			t.Errorf("adapter %d kept, want only the most recent %d", u.Key, MaxAdaptersPerWorker)
		}
	})
	if n != MaxAdaptersPerWorker {
		t.Fatalf("%d uses kept, want %d", n, MaxAdaptersPerWorker)
	}
	if b := a.Bytes(); b != adapterWorkerBytes+MaxAdaptersPerWorker*adapterUseBytes {
		t.Fatalf("%d bytes, want %d", b, adapterWorkerBytes+MaxAdaptersPerWorker*adapterUseBytes)
	}
}

func TestBusyCountsTheAdaptersHoldingASlot(t *testing.T) {
	f, a := loraFleet(t, 2, Settings{Policy: PolicyLeastLoad})
	seenOn(a, f.clock, 1, 2, true, "a-lora")
	d, g := f.holdAdapter(t, "b-lora", text("q", 64))
	if n := a.Busy(1); n != 1+btoi(d.Worker == 1) {
		t.Fatalf("worker 1 has %d adapters busy, want %d", n, 1+btoi(d.Worker == 1))
	}
	g.Release()
	f.clock.Step(2 * time.Minute) // the engine's reading ran out
	if n := a.Busy(1); n != 0 {
		t.Fatalf("%d busy once nothing runs, want 0", n)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestANewAdapterLeavesAnIdleAdaptersSlotWithinTheWindow(t *testing.T) {
	// An agent's adapter between two turns keeps its slot from a new one
	// while another worker has a slot nobody used lately.
	first, second := rendezvousFirst("new-lora", 2)
	f, a := loraFleet(t, 2, Settings{Policy: PolicyLeastLoad})
	a.SetView(first, AdapterView{Slots: 1, Seen: []AdapterSeen{{Key: AdapterKeyOf("agent-lora"), Last: f.clock.Now().Add(-2 * time.Second)}}})
	a.SetView(second, AdapterView{Slots: 1, Seen: []AdapterSeen{{Key: AdapterKeyOf("old-lora"), Last: f.clock.Now().Add(-AdapterWindow - time.Second)}}})
	if d := f.routeAdapter(t, "new-lora", text("q", 64)); d.Worker != second {
		t.Fatalf("went to %d, want %d: %d's slot served agent-lora 2 s ago", d.Worker, second, first)
	}
	// Once both slots are idle past the window, the one idle longer goes.
	f2, a2 := loraFleet(t, 2, Settings{Policy: PolicyLeastLoad})
	a2.SetView(first, AdapterView{Slots: 1, Seen: []AdapterSeen{{Key: AdapterKeyOf("x"), Last: f2.clock.Now().Add(-2 * AdapterWindow)}}})
	a2.SetView(second, AdapterView{Slots: 1, Seen: []AdapterSeen{{Key: AdapterKeyOf("y"), Last: f2.clock.Now().Add(-3 * AdapterWindow)}}})
	if d := f2.routeAdapter(t, "new-lora", text("q", 64)); d.Worker != second {
		t.Fatalf("went to %d, want %d whose slot was idle longer", d.Worker, second)
	}
}

func TestWithoutAKnownBoundAnAdapterStaysWhereItRanLately(t *testing.T) {
	f, a := loraFleet(t, 4, Settings{Policy: PolicyLeastLoad})
	a.SetView(3, AdapterView{Seen: []AdapterSeen{{Key: AdapterKeyOf("sql-lora"), Last: f.clock.Now().Add(-time.Second)}}})
	for w := WorkerID(1); w <= 4; w++ {
		f.setLoad(w, 1)
	}
	f.setLoad(3, 5)
	if d := f.routeAdapter(t, "sql-lora", text("q", 64)); d.Worker != 3 {
		t.Fatalf("went to %d, want 3 where it ran a second ago", d.Worker)
	}
	a.SetView(3, AdapterView{Seen: []AdapterSeen{{Key: AdapterKeyOf("sql-lora"), Last: f.clock.Now().Add(-2 * AdapterWindow)}}})
	f.clock.Step(2 * AdapterWindow) // and this replica's own request of it is as old
	if d := f.routeAdapter(t, "sql-lora", text("q", 64)); d.Worker == 3 {
		t.Fatalf("went to 3, where it ran two windows ago, over the less loaded")
	}
}

func TestAHotAdapterSpreadsOnlyToAWorkerWithRoom(t *testing.T) {
	th := DefaultThresholds()
	f, a := loraFleet(t, 3, Settings{Policy: PolicyLeastLoad, Thresholds: th})
	first, second := rendezvousFirst("hot-lora", 3)
	third := 6 - first - second
	seenOn(a, f.clock, third, 2, false, "hot-lora")
	seenOn(a, f.clock, first, 2, false, "a-lora", "b-lora") // its slots served others a second ago
	a.SetView(second, AdapterView{Slots: 2})
	var guards []*Guard
	defer func() {
		for _, g := range guards {
			g.Release()
		}
	}()
	spread := map[WorkerID]int{}
	for i := range 3 * int(th.HotLoad) {
		d, g := f.holdAdapter(t, "hot-lora", text(fmt.Sprint("q", i), 64))
		guards = append(guards, g)
		spread[d.Worker]++
	}
	if spread[first] != 0 || spread[second] == 0 {
		t.Fatalf("a hot adapter's requests went to %v: want %d, with room, not %d, whose slots serve others", spread, second, first)
	}
}
