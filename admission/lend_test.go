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
