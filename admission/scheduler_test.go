package admission

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func classes4() SchedulerConfig {
	return SchedulerConfig{Classes: DefaultClasses, QueueSize: 100, TierFair: true}
}

func isAdmitted(tk *Ticket) bool {
	select {
	case <-tk.Ready():
		return tk.Err() == nil
	default:
		return false
	}
}

func isWaiting(tk *Ticket) bool {
	select {
	case <-tk.Ready():
		return false
	default:
		return true
	}
}

func class(t *testing.T, s *Scheduler, name string) Class {
	t.Helper()
	c, err := s.Classes().Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAHigherClassGoesFirstWhenRoomFrees(t *testing.T) {
	s := New(classes4())
	s.SetLimit(1, t0)
	first := s.Arrive(Request{Class: class(t, s, "default"), Tenant: "a"}, t0)
	bulk := s.Arrive(Request{Class: class(t, s, "bulk"), Tenant: "a"}, t0)
	inter := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "b"}, t0.Add(time.Second))
	if !isAdmitted(first) || !isWaiting(bulk) || !isWaiting(inter) {
		t.Fatal("with one slot, the first request goes and the others wait")
	}
	s.Done(first, t0.Add(2*time.Second))
	if !isAdmitted(inter) || !isWaiting(bulk) {
		t.Fatal("the interactive request, later but higher, must go before the bulk one")
	}
	if inter.Waited() != time.Second {
		t.Fatalf("waited %v, want 1s", inter.Waited())
	}
	s.Done(inter, t0.Add(3*time.Second))
	if !isAdmitted(bulk) {
		t.Fatal("bulk goes once nothing above it waits")
	}
}

func TestALaterArrivalDoesNotOvertakeItsOwnClassQueue(t *testing.T) {
	s := New(classes4())
	s.SetLimit(1, t0)
	a := s.Arrive(Request{Tenant: "a"}, t0)
	b := s.Arrive(Request{Tenant: "a"}, t0)
	s.Done(a, t0)
	s.SetLimit(2, t0)
	c := s.Arrive(Request{Tenant: "a"}, t0)
	if !isAdmitted(b) || !isAdmitted(c) {
		t.Fatal("both go once there is room")
	}
	s.SetLimit(1, t0)
	d := s.Arrive(Request{Tenant: "a"}, t0)
	if !isWaiting(d) {
		t.Fatal("no room: it waits")
	}
}

func TestReservedSlotsAreNotTakenByLowerClasses(t *testing.T) {
	cfg := classes4()
	cfg.Reserved = map[string]int{"interactive": 2}
	cfg.MaxInFlight = 4
	s := New(cfg)
	var bulk []*Ticket
	for range 4 {
		bulk = append(bulk, s.Arrive(Request{Class: class(t, s, "bulk"), Tenant: "a"}, t0))
	}
	if !isAdmitted(bulk[0]) || !isAdmitted(bulk[1]) || !isWaiting(bulk[2]) {
		t.Fatal("bulk may take 2 of 4 slots while 2 are reserved for interactive")
	}
	i1 := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "b"}, t0)
	i2 := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "b"}, t0)
	i3 := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "b"}, t0)
	if !isAdmitted(i1) || !isAdmitted(i2) || !isWaiting(i3) {
		t.Fatal("interactive takes its reserved slots at once, and waits past the limit")
	}
	s.Done(bulk[0], t0)
	if !isAdmitted(i3) || !isWaiting(bulk[2]) {
		t.Fatal("a freed slot goes to the waiting interactive request")
	}
	st := s.Stats()
	if st.Classes[1].Reserved != 2 || st.Classes[1].InFlight != 3 || st.Classes[3].Queued != 2 {
		t.Fatalf("stats %+v", st.Classes)
	}
}

// served admits and ends requests one at a time through a single slot and
// returns the tokens each tenant was served.
func served(s *Scheduler, tickets []*Ticket, n int) map[string]int64 {
	out := map[string]int64{}
	for range n {
		for _, tk := range tickets {
			if tk.state == admitted {
				out[tk.req.Tenant] += tk.req.Cost
				s.Done(tk, t0)
				break
			}
		}
	}
	return out
}

func TestDeficitRoundRobinServesTenantsTheSameTokens(t *testing.T) {
	cfg := classes4()
	cfg.QueueSize = 1000
	cfg.Quantum = 1000
	cfg.TierFair = false
	s := New(cfg)
	s.SetLimit(1, t0)
	var all []*Ticket
	// a floods with large requests first, b comes later with small ones
	for range 100 {
		all = append(all, s.Arrive(Request{Tenant: "a", Cost: 1000}, t0))
	}
	for range 200 {
		all = append(all, s.Arrive(Request{Tenant: "b", Cost: 100}, t0))
	}
	got := served(s, all, 110)
	if got["a"] < 9000 || got["b"] < 9000 {
		t.Fatalf("tokens served %v over 110 requests: each tenant should get about 10000", got)
	}
}

func TestAFullQueueShedsTheLowestClassFirst(t *testing.T) {
	cfg := classes4()
	cfg.QueueSize = 2
	s := New(cfg)
	s.SetLimit(0, t0)
	b1 := s.Arrive(Request{Class: class(t, s, "bulk"), Tenant: "x"}, t0)
	d1 := s.Arrive(Request{Class: class(t, s, "default"), Tenant: "x"}, t0)
	i1 := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "y"}, t0)
	var r *Refusal
	if !errors.As(b1.Err(), &r) || r.Reason != Shed || r.Class != "bulk" || r.Tenant != "x" {
		t.Fatalf("the bulk request is shed for the interactive one: %v", b1.Err())
	}
	if !isWaiting(d1) || !isWaiting(i1) {
		t.Fatal("the others wait")
	}
	d2 := s.Arrive(Request{Class: class(t, s, "default"), Tenant: "z"}, t0)
	if !errors.As(d2.Err(), &r) || r.Reason != QueueFull || r.Hold != HeldBySaturation {
		t.Fatalf("nothing lower to shed: refused as queue full, held by saturation: %v", d2.Err())
	}
	if !s.Cancel(d1, TimedOut, t0.Add(time.Minute)) || !errors.As(d1.Err(), &r) || r.Reason != TimedOut {
		t.Fatalf("a cancelled ticket is refused with the caller's reason: %v", d1.Err())
	}
	if s.Cancel(d1, TimedOut, t0) {
		t.Fatal("a ticket is cancelled once")
	}
	if st := s.Stats(); st.Queued != 1 || len(st.Tenants) != 1 {
		t.Fatalf("one request left queued, its tenant alone kept: %+v", st)
	}
}

func TestATenantAtItsCeilingWaitsWhileAnotherGoes(t *testing.T) {
	cfg := classes4()
	cfg.TenantMaxInFlight = 2
	s := New(cfg)
	a1 := s.Arrive(Request{Tenant: "a"}, t0)
	a2 := s.Arrive(Request{Tenant: "a"}, t0)
	a3 := s.Arrive(Request{Tenant: "a", Class: class(t, s, "system")}, t0)
	b1 := s.Arrive(Request{Tenant: "b"}, t0)
	if !isAdmitted(a1) || !isAdmitted(a2) || !isWaiting(a3) || !isAdmitted(b1) {
		t.Fatal("a's third request waits at the ceiling, whatever its class; b goes")
	}
	s.Cancel(a3, TimedOut, t0)
	var r *Refusal
	if !errors.As(a3.Err(), &r) || r.Hold != HeldByTenantCeiling {
		t.Fatalf("the refusal names the ceiling: %v", a3.Err())
	}
}

func TestATenantAheadAcrossTheTierWaitsForOneWaitingAtAPeer(t *testing.T) {
	s := New(classes4())
	s.SetLimit(100, t0)
	def := class(t, s, "default")
	// b is served here, and at a peer a waits with nothing in flight.
	b1 := s.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0)
	s.SetPeer("peer", []PeerEntry{{Class: def, Tenant: TenantID("a"), Queued: 3}}, t0)
	b2 := s.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0)
	if !isAdmitted(b1) || !isWaiting(b2) {
		t.Fatal("b, 500 tokens ahead of a who waits at a peer, must wait")
	}
	var r *Refusal
	s2 := New(func() SchedulerConfig { c := classes4(); c.TierFair = false; return c }())
	s2.SetLimit(100, t0)
	s2.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0)
	s2.SetPeer("peer", []PeerEntry{{Class: def, Tenant: TenantID("a"), Queued: 3}}, t0)
	if !isAdmitted(s2.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0)) {
		t.Fatal("without the tier view, the peer's report does not count")
	}
	s.SetPeer("peer", []PeerEntry{{Class: def, Tenant: TenantID("a"), Queued: 2, InFlight: 1, Tokens: 500}}, t0)
	if !isAdmitted(b2) {
		t.Fatal("once a has as much in flight, b goes")
	}
	b3 := s.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0)
	s.Cancel(b3, TimedOut, t0)
	if !errors.As(b3.Err(), &r) || r.Hold != HeldByFairShare {
		t.Fatalf("the refusal names the fair share: %v", b3.Err())
	}
	s.SetPeer("peer", nil, t0)
	if b4 := s.Arrive(Request{Class: def, Tenant: "b", Cost: 500}, t0); !isAdmitted(b4) {
		t.Fatal("a peer that is forgotten holds nothing")
	}
}

func TestAPeersReportIsBounded(t *testing.T) {
	s := New(classes4())
	big := make([]PeerEntry, 1000)
	for i := range big {
		big[i] = PeerEntry{Tenant: uint64(i), Queued: 1}
	}
	for i := range MaxPeers + 10 {
		s.SetPeer(string(rune('A'+i)), big, t0)
	}
	st := s.Stats()
	if st.Peers != MaxPeers {
		t.Fatalf("%d peers kept, want %d", st.Peers, MaxPeers)
	}
	for _, rep := range s.peers.origins {
		if len(rep.entries) > MaxPeerEntries {
			t.Fatalf("%d entries kept of a report, want at most %d", len(rep.entries), MaxPeerEntries)
		}
	}
}

func TestTheReportKeepsTheLongestQueues(t *testing.T) {
	s := New(classes4())
	s.SetLimit(0, t0)
	for i := range 40 {
		for range i % 5 {
			s.Arrive(Request{Tenant: string(rune('a' + i))}, t0)
		}
	}
	rep := s.Report(nil, t0)
	if len(rep) != MaxPeerEntries || rep[0].Queued != 4 || rep[len(rep)-1].Queued < 3 {
		t.Fatalf("report %+v", rep)
	}
}

func TestTheRateBucketBoundsAdmissions(t *testing.T) {
	s := New(SchedulerConfig{RatePerSec: 2, Burst: 2, QueueSize: 10})
	a, b, c := s.Arrive(Request{}, t0), s.Arrive(Request{}, t0), s.Arrive(Request{}, t0)
	if !isAdmitted(a) || !isAdmitted(b) || !isWaiting(c) {
		t.Fatal("a burst of 2 goes, the third waits")
	}
	s.Poll(t0.Add(400 * time.Millisecond))
	if !isWaiting(c) {
		t.Fatal("0.8 tokens refilled: still waiting")
	}
	s.Poll(t0.Add(600 * time.Millisecond))
	if !isAdmitted(c) {
		t.Fatal("a token refilled: it goes")
	}
}

func TestDoneTwiceReleasesOnce(t *testing.T) {
	s := New(SchedulerConfig{MaxInFlight: 1, QueueSize: 10})
	a := s.Arrive(Request{}, t0)
	b := s.Arrive(Request{}, t0)
	c := s.Arrive(Request{}, t0)
	s.Done(a, t0)
	s.Done(a, t0)
	if !isAdmitted(b) || !isWaiting(c) {
		t.Fatal("a second Done must not free a second slot")
	}
	if st := s.Stats(); st.InFlight != 1 || st.Queued != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestTheRoomLeftIsSharedWithThePeersThatHaveRequestsWaiting(t *testing.T) {
	s := New(classes4())
	s.SetLimit(0, t0)
	var tks []*Ticket
	for range 10 {
		tks = append(tks, s.Arrive(Request{Class: 2, Tenant: "a"}, t0))
	}
	s.SetPeer("p1", []PeerEntry{{Class: 2, Tenant: TenantID("a"), Queued: 5}}, t0)
	s.SetPeer("p2", []PeerEntry{{Class: 2, Tenant: TenantID("b"), InFlight: 1, Tokens: 1}}, t0)
	s.SetLimit(8, t0)
	n := 0
	for _, tk := range tks {
		if isAdmitted(tk) {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d admitted of a room of 8 shared with one peer that has requests waiting, want 4", n)
	}
	s.SetPeer("p1", nil, t0)
	s.SetLimit(8, t0)
	if st := s.Stats(); st.InFlight != 8 {
		t.Fatalf("alone: %d in flight, want the whole room, 8", st.InFlight)
	}
}

// TestATicketDecidedAtArrivalMakesNoChannel: Arrive admits (or refuses)
// most requests at once, and nothing waits on their Ready: such a ticket is
// the one allocation of its admission, its Ready closed, where a queued
// ticket's stays open until its turn.
func TestATicketDecidedAtArrivalMakesNoChannel(t *testing.T) {
	s := New(SchedulerConfig{MaxInFlight: 2, QueueSize: 1})
	held := s.Arrive(Request{}, t0) // keeps the tenant's entry, which an idle tenant's last Done drops
	if allocs := testing.AllocsPerRun(100, func() {
		tk := s.Arrive(Request{}, t0)
		if !isAdmitted(tk) {
			t.Fatal("a request to an idle scheduler is not admitted at once")
		}
		s.Done(tk, t0)
	}); allocs > 1 {
		t.Errorf("an admission at arrival allocates %.0f objects, want the ticket alone", allocs)
	}
	first, queued := s.Arrive(Request{}, t0), s.Arrive(Request{}, t0)
	if refused := s.Arrive(Request{}, t0); !errors.As(refused.Err(), new(*Refusal)) || isWaiting(refused) {
		t.Fatal("a request past the full queue is not refused at once")
	}
	if !isWaiting(queued) {
		t.Fatal("a queued ticket is ready before its turn")
	}
	s.Done(first, t0)
	s.Done(held, t0)
	if !isAdmitted(queued) {
		t.Fatal("a queued ticket is not ready once admitted")
	}
}

// A stranger naming a new tenant per request (no keys: the tenant header
// is taken as sent) cannot grow the tenant tables past MaxTenantBytes: past
// it new tenants share OverflowTenant, and the bytes go back as tenants
// leave.
func TestMadeUpTenantsStayWithinTheirBudget(t *testing.T) {
	const budget = 10 * (tenantEntryBytes + 9)
	s := New(SchedulerConfig{MaxTenantBytes: budget})
	t0 := time.Unix(0, 0)
	var tickets []*Ticket
	for i := range 1000 {
		tk := s.Arrive(Request{Tenant: fmt.Sprintf("tenant-%03d", i)}, t0)
		if tk.Err() != nil {
			t.Fatalf("request %d refused: %v", i, tk.Err())
		}
		tickets = append(tickets, tk)
	}
	st := s.Stats()
	if st.TenantBytes > budget {
		t.Fatalf("the tenants take %d bytes, over their budget of %d", st.TenantBytes, budget)
	}
	if st.Overflowed < 990 || tickets[999].Request().Tenant != OverflowTenant || tickets[0].Request().Tenant != "tenant-000" {
		t.Fatalf("overflowed %d, the last tenant %q, the first %q", st.Overflowed, tickets[999].Request().Tenant,
			tickets[0].Request().Tenant)
	}
	for _, tk := range tickets {
		s.Done(tk, t0)
	}
	if st := s.Stats(); st.TenantBytes != 0 {
		t.Fatalf("%d bytes of tenants left with nothing in flight", st.TenantBytes)
	}
	if tk := s.Arrive(Request{Tenant: "tenant-999"}, t0); tk.Request().Tenant != "tenant-999" {
		t.Fatalf("once the tenants left, a new one is %q", tk.Request().Tenant)
	}
}

// A request whose cost was not known at arrival (a body without a length)
// is charged its real cost once known: its tenant's tokens follow, and go
// back whole when it is done.
func TestSetCostCorrectsAnAdmittedRequestsTokens(t *testing.T) {
	s := New(SchedulerConfig{})
	t0 := time.Unix(0, 0)
	tk := s.Arrive(Request{Tenant: "a", Cost: 256}, t0)
	s.SetCost(tk, 100_256)
	if got := s.Stats().Tenants[0].Tokens; got != 100_256 {
		t.Fatalf("tenant tokens %d after SetCost, want 100256", got)
	}
	s.Done(tk, t0)
	s.SetCost(tk, 5) // released: left alone
	if st := s.Stats(); len(st.Tenants) != 0 || tk.Request().Cost != 100_256 {
		t.Fatalf("after Done: %+v, cost %d", st.Tenants, tk.Request().Cost)
	}
}
