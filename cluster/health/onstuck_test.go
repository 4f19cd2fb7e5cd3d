package health

import (
	"testing"
	"time"
)

// TestOnStuckRunsWhenTheAttemptIsJudgedStuck: the function given to OnStuck
// runs once the attempt's worker is judged wedged (not before, not for an
// attempt on a progressing worker), and at once when given to an attempt
// already stuck.
func TestOnStuckRunsWhenTheAttemptIsJudgedStuck(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 2)...)
	silent := begin(t, m, 1)
	defer silent.End(OutcomeCanceled)
	other := begin(t, m, 2)
	defer other.End(OutcomeSuccess)
	ran, otherRan := make(chan struct{}), make(chan struct{})
	silent.OnStuck(func() { close(ran) })
	other.OnStuck(func() { close(otherRan) })
	clock.Step(30 * time.Second)
	other.Progress(1)
	m.Tick()
	if isClosed(ran) {
		t.Fatal("OnStuck ran before the worker was judged wedged")
	}
	clock.Step(30 * time.Second)
	other.Progress(1)
	m.Tick()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("OnStuck did not run for an attempt on a wedged worker")
	}
	if isClosed(otherRan) {
		t.Fatal("OnStuck ran for an attempt on a progressing worker")
	}
	again := make(chan struct{})
	silent.OnStuck(func() { close(again) })
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("OnStuck given to an attempt already stuck did not run")
	}
}
