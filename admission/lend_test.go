package admission

import (
	"testing"
	"time"
)

func lending(reserved int) SchedulerConfig {
	c := classes4()
	c.Reserved, c.Lend = map[string]int{"interactive": reserved}, true
	return c
}

// TestBulkBorrowsAnIdleReservedSlotAndInteractiveTakesItBack: with Lend,
// bulk fills every slot of the engines' limit, the one reserved for
// interactive included; an interactive request then goes at once, over the
// limit by the one slot bulk borrowed (it waits at the head of the
// engine's queue for the first borrower to end), and a second interactive waits, since the first holds what was
// reserved.
func TestBulkBorrowsAnIdleReservedSlotAndInteractiveTakesItBack(t *testing.T) {
	s := New(lending(1))
	s.SetLimit(4, t0)
	bulk := class(t, s, "bulk")
	var held []*Ticket
	for range 4 {
		held = append(held, s.Arrive(Request{Class: bulk, Tenant: "b"}, t0))
	}
	for i, tk := range held {
		if !isAdmitted(tk) {
			t.Fatalf("bulk request %d waits: an idle reserved slot is lent", i)
		}
	}
	if more := s.Arrive(Request{Class: bulk, Tenant: "b"}, t0); !isWaiting(more) {
		t.Fatal("a fifth bulk request goes: bulk may borrow, not pass the limit")
	}
	inter := class(t, s, "interactive")
	first := s.Arrive(Request{Class: inter, Tenant: "i"}, t0)
	if !isAdmitted(first) {
		t.Fatal("the interactive request waits for a bulk one to end: it must take its reserved slot back at once")
	}
	second := s.Arrive(Request{Class: inter, Tenant: "i"}, t0)
	if !isWaiting(second) {
		t.Fatal("a second interactive request goes over the limit: only the reserved slot is taken back")
	}
	if st := s.Stats(); st.InFlight != 5 {
		t.Fatalf("%d in flight, want the limit and the slot taken back", st.InFlight)
	}
	s.Done(held[0], t0.Add(time.Second))
	if !isWaiting(second) {
		t.Fatal("a bulk request ended, but the interactive one waiting at the engine takes its slot: nothing more goes")
	}
	s.Done(first, t0.Add(time.Second))
	if !isAdmitted(second) {
		t.Fatal("the first interactive ended: the second goes, ahead of queued bulk")
	}
}

// TestWithoutLendingAReservedSlotStaysIdle: the rule before Lend.
func TestWithoutLendingAReservedSlotStaysIdle(t *testing.T) {
	c := lending(1)
	c.Lend = false
	s := New(c)
	s.SetLimit(4, t0)
	bulk := class(t, s, "bulk")
	for range 3 {
		s.Arrive(Request{Class: bulk, Tenant: "b"}, t0)
	}
	if fourth := s.Arrive(Request{Class: bulk, Tenant: "b"}, t0); !isWaiting(fourth) {
		t.Fatal("bulk took the reserved slot without Lend")
	}
}

// TestTakingBackNeverPassesMaxInFlight: the configured bound stays a
// bound; only the engines' limit is passed, since the engines queue what
// passes it by priority.
func TestTakingBackNeverPassesMaxInFlight(t *testing.T) {
	c := lending(1)
	c.MaxInFlight = 4
	s := New(c)
	s.SetLimit(4, t0)
	bulk := class(t, s, "bulk")
	for range 4 {
		s.Arrive(Request{Class: bulk, Tenant: "b"}, t0)
	}
	if inter := s.Arrive(Request{Class: class(t, s, "interactive"), Tenant: "i"}, t0); !isWaiting(inter) {
		t.Fatal("an interactive request passed --max-concurrent-requests")
	}
}

// TestASuspendedBorrowerResumesFirstOnceTheSlotItGaveBackFrees: the
// interactive request that took its slot back is told so (TookBack, and
// none of the others), the bulk request preempted for it gives its slot
// back and waits ahead of the bulk requests that never began, and goes
// again once the interactive one ends.
func TestASuspendedBorrowerResumesFirstOnceTheSlotItGaveBackFrees(t *testing.T) {
	s := New(lending(1))
	s.SetLimit(4, t0)
	bulk, inter := class(t, s, "bulk"), class(t, s, "interactive")
	var held []*Ticket
	for range 4 {
		held = append(held, s.Arrive(Request{Class: bulk, Tenant: "b"}, t0))
	}
	queued := s.Arrive(Request{Class: bulk, Tenant: "b"}, t0)
	tk := s.Arrive(Request{Class: inter, Tenant: "i"}, t0)
	if !isAdmitted(tk) || !tk.TookBack() {
		t.Fatal("the interactive request must go at once, over the bound, taking its slot back")
	}
	for i, h := range held {
		if h.TookBack() {
			t.Fatalf("bulk request %d took a slot back: it was admitted within the bound", i)
		}
	}
	victim := held[3]
	if !s.Suspend(victim, t0.Add(time.Millisecond)) || !isWaiting(victim) {
		t.Fatal("the preempted bulk request must wait again: the interactive one holds the slot it gave back")
	}
	if st := s.Stats(); st.InFlight != 4 {
		t.Fatalf("%d in flight after the suspension, want the engines' 4", st.InFlight)
	}
	s.Done(tk, t0.Add(2*time.Millisecond))
	if !isAdmitted(victim) || !isWaiting(queued) {
		t.Fatal("the interactive request ended: the suspended bulk request goes first, before the one that never began")
	}
	if s.Suspend(queued, t0) {
		t.Fatal("a waiting ticket was suspended")
	}
	s.Done(victim, t0.Add(3*time.Millisecond))
	if !isAdmitted(queued) {
		t.Fatal("the resumed request ended: the next bulk one goes")
	}
}

// TestASuspendedTicketWhoseClientLeavesIsRefusedAndHoldsNothing: a
// preempted request whose client leaves while it waits to resume is
// cancelled like any queued one, and its Done gives nothing back twice.
func TestASuspendedTicketWhoseClientLeavesIsRefusedAndHoldsNothing(t *testing.T) {
	s := New(lending(1))
	s.SetLimit(1, t0)
	bulk, inter := class(t, s, "bulk"), class(t, s, "interactive")
	b := s.Arrive(Request{Class: bulk, Tenant: "b"}, t0)
	i := s.Arrive(Request{Class: inter, Tenant: "i"}, t0)
	s.Suspend(b, t0)
	if !s.Cancel(b, ClientGone, t0) || b.Err() == nil {
		t.Fatal("the suspended ticket's client left: it must be refused")
	}
	s.Done(b, t0)
	if st := s.Stats(); st.InFlight != 1 || st.Queued != 0 {
		t.Fatalf("in flight %d queued %d, want the interactive request alone", st.InFlight, st.Queued)
	}
	s.Done(i, t0)
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("%d in flight, want none", st.InFlight)
	}
}
