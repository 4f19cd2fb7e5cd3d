package core

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
)

// TestTheDoorsTradeHowLongTheirQueuesWaited: two doors in front of one
// engine that runs 2 at a time, each with 2 in flight and 1 queued, a's
// since t0 and b's since 100 ms later. Through their queue reports (the
// gossip's form of them, waits in ms) each learns how long the other's
// waited: a slot that frees at b goes to a's older request, one that frees
// at a to a's own.
func TestTheDoorsTradeHowLongTheirQueuesWaited(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	loads := affinity.NewLoadTable(nil)
	loads.Get(1)
	full := func(dst []admission.Reading) []admission.Reading {
		return append(dst, admission.Reading{Worker: 1, At: time.Unix(1000, 0), Running: 2, KVUsage: 1})
	}
	a, b := newDoor(t, clk, loads, full), newDoor(t, clk, loads, full)
	a.Tick()
	b.Tick()
	arrive := func(d *Door, n int) []*admission.Ticket {
		var tks []*admission.Ticket
		for range n {
			tks = append(tks, d.Arrive(0, "", 0))
		}
		return tks
	}
	aTickets := arrive(a, 3)
	clk.Step(100 * time.Millisecond)
	bTickets := arrive(b, 3)
	for name, d := range map[string]*Door{"a": a, "b": b} {
		if st := d.Scheduler().Stats(); st.InFlight != 2 || st.Queued != 1 {
			t.Fatalf("setup: %s %+v, want 2 in flight and 1 queued", name, st)
		}
	}
	clk.Step(100 * time.Millisecond)
	reportA := a.LocalQueues(nil)
	if len(reportA) != 1 || reportA[0].WaitedMs != 200 {
		t.Fatalf("a reports %+v, want its queue's oldest waiting 200 ms", reportA)
	}
	b.RemoteQueues("a", reportA)
	a.RemoteQueues("b", b.LocalQueues(nil))

	b.Done(bTickets[0])
	if st := b.Scheduler().Stats(); st.InFlight != 1 || st.Queued != 1 {
		t.Fatalf("b gave its freed slot to its own younger request: %+v", st)
	}
	a.Done(aTickets[0])
	if st := a.Scheduler().Stats(); st.InFlight != 2 || st.Queued != 0 {
		t.Fatalf("a's request, the tier's oldest, did not take a's freed slot: %+v", st)
	}
}

// newDoor is a door of one tier-fair class with a queue of 10, on clk.
func newDoor(t *testing.T, clk *testingclock.FakeClock, loads *affinity.LoadTable,
	readings func([]admission.Reading) []admission.Reading) *Door {
	t.Helper()
	d, err := NewDoor(DoorConfig{Admission: admission.Config{QueueSize: 10, TierFair: true}, Clock: clk, Loads: loads,
		Readings: readings})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTheDoorsLimitIsTheEnginesBoundLessThePeers: one engine seen full
// at 4 running, 3 of which another replica runs: at its tick the door
// lets one request in and queues the next. Without a saturation signal it
// sets no limit at all.
func TestTheDoorsLimitIsTheEnginesBoundLessThePeers(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	loads := affinity.NewLoadTable(nil)
	loads.Get(1).SetRemote(3)
	full := func(dst []admission.Reading) []admission.Reading {
		return append(dst, admission.Reading{Worker: 1, At: time.Unix(1000, 0), Running: 4, KVUsage: 1})
	}
	d := newDoor(t, clk, loads, full)
	d.Tick()
	if st := d.Scheduler().Stats(); st.Limit != 1 {
		t.Fatalf("limit %d, want the bound 4 less the peer's 3", st.Limit)
	}
	d.Arrive(0, "", 0)
	d.Arrive(0, "", 0)
	if st := d.Scheduler().Stats(); st.InFlight != 1 || st.Queued != 1 {
		t.Fatalf("%+v, want 1 in flight and 1 queued", st)
	}
	blind := newDoor(t, clk, loads, nil)
	blind.Tick()
	if st := blind.Scheduler().Stats(); st.Limit != -1 {
		t.Fatalf("without readings: limit %d, want none (-1)", st.Limit)
	}
}

// TestTheDoorChargesABodyItsPromptAndTheOutputExpected: a 4000-byte body
// costs its 1000 prompt tokens and 256 expected; a body read without a
// length costs what it turned out to be once Recost says so.
func TestTheDoorChargesABodyItsPromptAndTheOutputExpected(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	d := newDoor(t, clk, affinity.NewLoadTable(nil), nil)
	tokens := func() uint64 { return d.LocalQueues(nil)[0].Tokens }
	tk := d.Arrive(0, "", 4000)
	if got := tokens(); got != 1256 {
		t.Fatalf("a 4000-byte body in flight: %d tokens, want 1256", got)
	}
	d.Done(tk)
	tk = d.Arrive(0, "", 0)
	d.Recost(tk, 8000)
	if got := tokens(); got != 2256 {
		t.Fatalf("a body of 8000 bytes read without a length: %d tokens, want 2256", got)
	}
}
