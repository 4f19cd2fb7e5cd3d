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
	cfg := admission.SchedulerConfig{QueueSize: 10, TierFair: true}
	a, b := NewDoor(cfg, 0, clk.Now), NewDoor(cfg, 0, clk.Now)
	loads := affinity.NewLoadTable(nil)
	loads.Get(1)
	full := []admission.Reading{{Worker: 1, At: clk.Now(), Running: 2, KVUsage: 1}}
	a.Refresh(loads, full, clk.Now())
	b.Refresh(loads, full, clk.Now())
	arrive := func(d *Door, n int) []*admission.Ticket {
		var tks []*admission.Ticket
		for range n {
			tks = append(tks, d.Scheduler().Arrive(admission.Request{Cost: 1}, clk.Now()))
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
	b.RemoteQueues("a", reportA, clk.Now())
	a.RemoteQueues("b", b.LocalQueues(nil), clk.Now())

	b.Scheduler().Done(bTickets[0], clk.Now())
	if st := b.Scheduler().Stats(); st.InFlight != 1 || st.Queued != 1 {
		t.Fatalf("b gave its freed slot to its own younger request: %+v", st)
	}
	a.Scheduler().Done(aTickets[0], clk.Now())
	if st := a.Scheduler().Stats(); st.InFlight != 2 || st.Queued != 0 {
		t.Fatalf("a's request, the tier's oldest, did not take a's freed slot: %+v", st)
	}
}
