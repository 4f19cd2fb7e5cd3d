package admission

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// tierRun simulates a tier of replicas sharing engines of capacity slots:
// closed-loop clients of two tenants, every request holding a slot for
// hold steps; light's clients spread over the replicas, heavy's all at
// replica 0 when pinned. Each step every replica's limit is the capacity
// less what the others have in flight, and every replica hears every
// other's report. It returns the tokens each tenant was admitted after a
// warm-up.
func tierRun(t *testing.T, tier bool, pinned bool, replicas, slots, light, heavy, hold, steps int) map[string]int64 {
	t.Helper()
	ss := make([]*Scheduler, replicas)
	for i := range ss {
		ss[i] = New(SchedulerConfig{Classes: DefaultClasses, QueueSize: 1000, TierFair: tier})
	}
	type running struct {
		tk     *Ticket
		s      *Scheduler
		client int
		until  int
	}
	var flying []running
	var waiting []running // queued tickets, with the replica they wait at
	now := t0
	rng := rand.New(rand.NewPCG(1, 2))
	tenantOf := func(client int) string {
		if client < light {
			return "light"
		}
		return "heavy"
	}
	// Each client sends to a replica drawn at random, heavy's to replica
	// 0 when pinned.
	arrive := func(client int) {
		r := rng.IntN(replicas)
		if tenantOf(client) == "heavy" && pinned {
			r = 0
		}
		tk := ss[r].Arrive(Request{Class: 2, Tenant: tenantOf(client), Cost: 320}, now)
		waiting = append(waiting, running{tk: tk, s: ss[r], client: client})
	}
	for c := range light + heavy {
		arrive(c)
	}
	served := map[string]int64{}
	for step := range steps {
		now = now.Add(10 * time.Millisecond)
		// Requests that finish free their slot; their clients send again.
		kept := flying[:0]
		for _, f := range flying {
			if step < f.until {
				kept = append(kept, f)
				continue
			}
			f.s.Done(f.tk, now)
			arrive(f.client)
		}
		flying = kept
		// The replicas act in a random order: none always sees freed room
		// first.
		for _, i := range rng.Perm(replicas) {
			s := ss[i]
			others := 0
			for j, o := range ss {
				if j != i {
					others += o.Stats().InFlight
				}
			}
			s.SetLimit(max(0, slots-others), now)
			for j, o := range ss {
				if j != i {
					o.SetPeer(fmt.Sprint(i), s.Report(nil, now), now)
				}
			}
		}
		still := waiting[:0]
		for _, w := range waiting {
			if isWaiting(w.tk) {
				still = append(still, w)
				continue
			}
			if w.tk.Err() != nil {
				t.Fatalf("refused: %v", w.tk.Err())
			}
			flying = append(flying, running{tk: w.tk, s: w.s, client: w.client, until: step + hold})
			if step > steps/5 {
				served[w.tk.Request().Tenant] += w.tk.Request().Cost
			}
		}
		waiting = still
	}
	return served
}

func share(served map[string]int64, tenant string) float64 {
	return float64(served[tenant]) / (float64(served["light"]+served["heavy"]) / 2)
}

func TestTwoTenantsGetTheirFairShareAcrossATierWhereverTheirRequestsGo(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		got := tierRun(t, true, pinned, 4, 16, 12, 120, 50, 3000)
		for _, tenant := range []string{"light", "heavy"} {
			if sh := share(got, tenant); sh < 0.9 {
				t.Errorf("pinned %v: %s got %.2f of its fair share (%v), want at least 0.9", pinned, tenant, sh, got)
			}
		}
	}
}

func TestWithoutTheTierViewAShareDependsOnWhereTheRequestsGo(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		got := tierRun(t, false, pinned, 4, 16, 12, 120, 50, 3000)
		if sh := share(got, "light"); sh >= 0.9 {
			t.Fatalf("each replica alone, pinned %v: light got %.2f of its share (%v); the tier view would not be needed", pinned, sh, got)
		}
		t.Logf("each replica alone, heavy pinned %v: light %.2f, heavy %.2f of their fair shares", pinned,
			share(got, "light"), share(got, "heavy"))
	}
}

// saturatedPair is two replicas of one tenant on engines of 8 slots, 4 in
// flight at each, 12 requests queued at a (arrived at aAt) and 2 at b (at
// bAt), each having heard the other's report made at reported: the state
// in which b's next free slot decides whose request goes next.
func saturatedPair(t *testing.T, cfg SchedulerConfig, aAt, bAt, reported time.Time) (a, b *Scheduler, bFlying, bQueued []*Ticket) {
	t.Helper()
	a, b = New(cfg), New(cfg)
	arrive := func(s *Scheduler, n int, at time.Time) []*Ticket {
		var tks []*Ticket
		for range n {
			tks = append(tks, s.Arrive(Request{Class: 2, Tenant: "t", Cost: 1}, at))
		}
		return tks
	}
	a.SetLimit(4, t0)
	b.SetLimit(4, t0)
	arrive(a, 4, t0)
	bFlying = arrive(b, 4, t0)
	arrive(a, 12, aAt)
	bQueued = arrive(b, 2, bAt)
	a.SetPeer("b", b.Report(nil, reported), reported)
	b.SetPeer("a", a.Report(nil, reported), reported)
	if sa, sb := a.Stats(), b.Stats(); sa.InFlight != 4 || sa.Queued != 12 || sb.InFlight != 4 || sb.Queued != 2 {
		t.Fatalf("setup: a %+v, b %+v", sa, sb)
	}
	return a, b, bFlying, bQueued
}

// reportedAt is when saturatedPair's replicas hear each other: 200 ms
// after the first of them queued.
var reportedAt = t0.Add(200 * time.Millisecond)

// bFreesASlot is saturatedPair with a's requests queued at aAt and b's at
// bAt, after one of b's requests in flight ends at reportedAt.
func bFreesASlot(t *testing.T, cfg SchedulerConfig, aAt, bAt time.Time) (a, b *Scheduler, bQueued []*Ticket) {
	t.Helper()
	a, b, bFlying, bQueued := saturatedPair(t, cfg, aAt, bAt, reportedAt)
	b.Done(bFlying[0], reportedAt)
	return a, b, bQueued
}

// TestASlotThatFreesGoesToTheTiersLongestWaitingRequest: with the engines
// full, a request that ends at b does not hand its slot to b's queue while
// a's requests have waited longer; a takes it with its next limit. A
// request then waits about as long wherever it arrived, as in one queue;
// slots that stayed where they freed made a request wait as long as its
// own replica's queue took to drain.
func TestASlotThatFreesGoesToTheTiersLongestWaitingRequest(t *testing.T) {
	now := reportedAt
	a, b, bQueued := bFreesASlot(t, classes4(), t0, t0.Add(100*time.Millisecond))
	if st := b.Stats(); st.InFlight != 3 || st.Queued != 2 {
		t.Fatalf("b took its freed slot for a request younger than a's: %+v", st)
	}
	// A request held so past its timeout is refused saying what held it
	// (the door answers 408 queue_timeout, naming saturation).
	if !b.Cancel(bQueued[1], TimedOut, now) {
		t.Fatal("b's last queued request is not queued")
	}
	var r *Refusal
	if !errors.As(bQueued[1].Err(), &r) || r.Hold != HeldBySaturation {
		t.Fatalf("the held request was refused with %v, want held by saturation", bQueued[1].Err())
	}
	a.SetPeer("b", b.Report(nil, now), now)
	a.SetLimit(8-3, now) // the engines' room less what b runs
	if st := a.Stats(); st.InFlight != 5 || st.Queued != 11 {
		t.Fatalf("a, whose requests waited longest, did not take the slot b freed: %+v", st)
	}
	// With nothing waiting at a, b's freed slots are b's own again.
	b.SetPeer("a", New(classes4()).Report(nil, now), now)
	if st := b.Stats(); st.InFlight != 4 || st.Queued != 0 {
		t.Fatalf("b did not take its freed slot with nothing waiting at a: %+v", st)
	}
}

// TestASlotStaysWhereItsRequestWaitedLongest: the order is by how long a
// request waited, not by how many wait. b's 2 arrived before a's 12, so
// the slot b frees is b's; a peer's oldest is reckoned back from when its
// report arrived, by the wait it reported.
func TestASlotStaysWhereItsRequestWaitedLongest(t *testing.T) {
	_, b, _ := bFreesASlot(t, classes4(), t0.Add(100*time.Millisecond), t0)
	if st := b.Stats(); st.InFlight != 4 || st.Queued != 1 {
		t.Fatalf("b's request, the tier's oldest, did not take b's freed slot: %+v", st)
	}
}

// TestWithoutTheTierViewASlotStaysWhereItFrees is the same without the
// peers' queue reports (--disable-tier-fairness): b's freed slot goes to
// b's own queue, however long a's requests waited.
func TestWithoutTheTierViewASlotStaysWhereItFrees(t *testing.T) {
	cfg := classes4()
	cfg.TierFair = false
	_, b, _ := bFreesASlot(t, cfg, t0, t0.Add(100*time.Millisecond))
	if st := b.Stats(); st.InFlight != 4 || st.Queued != 1 {
		t.Fatalf("without the tier view b should take its own freed slot: %+v", st)
	}
}

// TestAPeerWhoseOldestCannotGoHoldsUpOnlyTheSlotsItCouldFill: b's one
// request waits for a reason of b's own (its limit shows no room), older
// than anything at a. a, with the engines' room for 4 (its share of it 2
// while b reports a queue), admits its share rather than holding its whole
// queue behind a request that does not go; with b's queue gone, the rest.
func TestAPeerWhoseOldestCannotGoHoldsUpOnlyTheSlotsItCouldFill(t *testing.T) {
	a, b := New(classes4()), New(classes4())
	b.SetLimit(0, t0)
	b.Arrive(Request{Class: 2, Tenant: "t", Cost: 1}, t0)
	later := t0.Add(time.Second)
	a.SetPeer("b", b.Report(nil, later), later)
	a.SetLimit(4, later)
	for range 4 {
		a.Arrive(Request{Class: 2, Tenant: "t", Cost: 1}, later)
	}
	if st := a.Stats(); st.InFlight != 2 || st.Queued != 2 {
		t.Fatalf("a behind b's stuck request: %+v, want its share of the room, 2, in flight", st)
	}
	a.SetPeer("b", nil, later)
	a.SetLimit(4, later)
	if st := a.Stats(); st.InFlight != 4 || st.Queued != 0 {
		t.Fatalf("a with b's queue gone: %+v, want all 4 in flight", st)
	}
}
