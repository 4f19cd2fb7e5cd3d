package admit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/leaktest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// overBound is an admitter in front of one engine that runs 2 at a time, with two requests
// admitted, and then another replica's request on the engine: the door's limit falls to 1 with
// 2 in flight, as when a request took its reserved slot back over the bound.
func overBound(t *testing.T) (a *Admitter, first, second *admission.Ticket) {
	t.Helper()
	loads := affinity.NewLoadTable(nil)
	loads.Get(1)
	full := func(dst []admission.Reading) []admission.Reading {
		return append(dst, admission.Reading{Worker: 1, At: time.Now(), Running: 2, KVUsage: 1})
	}
	a, err := New(admission.Config{QueueSize: 10}, loads, full, pathmetrics.NewAdmission(metrics.NewSet()), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Door().Tick()
	first, second = a.Door().Arrive(0, "", 0), a.Door().Arrive(0, "", 0)
	loads.Get(1).SetRemote(1)
	a.Door().Tick()
	if st := a.Door().Scheduler().Stats(); st.InFlight != 2 || st.Limit != 1 {
		t.Fatalf("setup: %+v, want 2 in flight over a limit of 1", st)
	}
	return a, first, second
}

func TestAReadmittedStreamWaitsForASlotThenResumes(t *testing.T) {
	a, first, second := overBound(t)
	done := make(chan error, 1)
	go func() { done <- a.Readmit(first, time.Now().Add(time.Minute), context.Background(), nil) }()
	testwait.Eventually(t, 5*time.Second, func() bool { return a.Door().Scheduler().Stats().Queued == 1 }, "the stream to queue again")
	select {
	case err := <-done:
		t.Fatalf("readmitted with no slot free: %v", err)
	default:
	}
	a.Release(second)
	if err := <-done; err != nil {
		t.Fatalf("readmit after a slot freed: %v", err)
	}
	if st := a.Door().Scheduler().Stats(); st.InFlight != 1 || st.Queued != 0 {
		t.Fatalf("after the readmission %+v, want it alone in flight", st)
	}
}

func TestAReadmittedStreamWhoseDeadlinePassesIsRefusedAndHoldsNothing(t *testing.T) {
	a, first, _ := overBound(t)
	err := a.Readmit(first, time.Now().Add(20*time.Millisecond), context.Background(), nil)
	if !errors.Is(err, failure.ErrUpstreamTimeout) {
		t.Fatalf("readmit past its deadline: %v, want an upstream timeout", err)
	}
	if st := a.Door().Scheduler().Stats(); st.InFlight != 1 || st.Queued != 0 {
		t.Fatalf("after the refusal %+v, want only the other request in flight", st)
	}
}

func TestAReadmittedStreamWhoseClientLeavesIsRefusedWithItsCause(t *testing.T) {
	a, first, _ := overBound(t)
	life, leave := context.WithCancel(context.Background())
	gone := errors.New("the client left")
	done := make(chan error, 1)
	go func() { done <- a.Readmit(first, time.Now().Add(time.Minute), life, func() error { return gone }) }()
	testwait.Eventually(t, 5*time.Second, func() bool { return a.Door().Scheduler().Stats().Queued == 1 }, "the stream to queue again")
	leave()
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("readmit whose client left: %v, want its cause", err)
	}
	if st := a.Door().Scheduler().Stats(); st.InFlight != 1 || st.Queued != 0 {
		t.Fatalf("after the refusal %+v, want only the other request in flight", st)
	}
}
