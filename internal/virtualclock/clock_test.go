package virtualclock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.Main(m) }

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestClockMovesOnlyForward(t *testing.T) {
	c := New(epoch)
	c.AdvanceTo(3 * time.Second)
	c.AdvanceTo(time.Second)
	c.Advance(-time.Hour)
	c.Advance(time.Second)
	if c.Elapsed() != 4*time.Second || !c.Now().Equal(epoch.Add(4*time.Second)) {
		t.Fatalf("clock at %v (%v), want 4s after epoch", c.Elapsed(), c.Now())
	}
	if got := c.Since(epoch); got != 4*time.Second {
		t.Fatalf("Since(epoch) = %v, want 4s", got)
	}
}

func TestTimersFireInDeadlineOrderEachAtItsInstant(t *testing.T) {
	c := New(epoch)
	var fired []time.Duration
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		c.AfterFunc(d, func() { fired = append(fired, c.Elapsed()) })
	}
	c.Advance(10 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(fired) != len(want) {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
	for i := range want {
		if fired[i] != want[i] {
			t.Fatalf("fired at %v, want %v", fired, want)
		}
	}
	if c.Elapsed() != 10*time.Second {
		t.Fatalf("clock at %v after the advance, want 10s", c.Elapsed())
	}
}

func TestTimerFiresOnlyOnceItsDeadlinePassed(t *testing.T) {
	c := New(epoch)
	timer := c.NewTimer(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-timer.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	c.Advance(time.Millisecond)
	select {
	case at := <-timer.C():
		if !at.Equal(epoch.Add(time.Second)) {
			t.Fatalf("timer delivered %v, want its deadline", at)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
}

func TestStoppedTimerNeverFires(t *testing.T) {
	c := New(epoch)
	called := false
	timer := c.AfterFunc(time.Second, func() { called = true })
	if !timer.Stop() {
		t.Fatal("Stop on a pending timer reported it had already fired")
	}
	c.Advance(time.Hour)
	if called || c.Waiters() != 0 {
		t.Fatalf("called = %v, waiters = %d after Stop, want false and 0", called, c.Waiters())
	}
	if timer.Stop() {
		t.Fatal("a second Stop reported it prevented the call")
	}
}

func TestTimerResetRearmsFromNow(t *testing.T) {
	c := New(epoch)
	timer := c.NewTimer(time.Second)
	c.Advance(900 * time.Millisecond)
	if !timer.Reset(time.Second) {
		t.Fatal("Reset on a pending timer reported it was not pending")
	}
	c.Advance(900 * time.Millisecond)
	select {
	case <-timer.C():
		t.Fatal("reset timer fired at its old deadline")
	default:
	}
	c.Advance(100 * time.Millisecond)
	if len(timer.C()) != 1 {
		t.Fatal("reset timer did not fire a second after the reset")
	}
}

func TestNonPositiveTimerFiresAtOnce(t *testing.T) {
	c := New(epoch)
	if len(c.NewTimer(0).C()) != 1 || len(c.After(-time.Second)) != 1 {
		t.Fatal("a timer for d <= 0 did not fire at once")
	}
}

func TestTickerDropsTicksNobodyTook(t *testing.T) {
	c := New(epoch)
	tk := c.NewTicker(time.Second)
	defer tk.Stop()
	c.Advance(5 * time.Second)
	if got := <-tk.C(); !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("first tick at %v, want 1s after epoch (the ones after it dropped)", got)
	}
	if len(tk.C()) != 0 {
		t.Fatal("ticks were queued beyond one")
	}
	c.Advance(time.Second)
	if got := <-tk.C(); !got.Equal(epoch.Add(6 * time.Second)) {
		t.Fatalf("next tick at %v, want 6s after epoch", got)
	}
	tk.Stop()
	c.Advance(time.Hour)
	if len(tk.C()) != 0 || c.Waiters() != 0 {
		t.Fatal("a stopped ticker ticked")
	}
}

func TestSleepContextStopsWhereAFiredFunctionEndedTheContext(t *testing.T) {
	c := New(epoch)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.AfterFunc(4*time.Second, cancel)
	if err := c.SleepContext(ctx, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("SleepContext = %v, want context.Canceled", err)
	}
	if c.Elapsed() != 4*time.Second {
		t.Fatalf("clock at %v, want 4s, where the context ended", c.Elapsed())
	}
	if err := c.SleepContext(ctx, time.Second); !errors.Is(err, context.Canceled) || c.Elapsed() != 4*time.Second {
		t.Fatalf("SleepContext on a done context = %v at %v, want Canceled without moving", err, c.Elapsed())
	}
}

func TestSleepMovesTheClock(t *testing.T) {
	c := New(epoch)
	c.Sleep(time.Minute)
	if err := c.SleepContext(context.Background(), time.Minute); err != nil || c.Elapsed() != 2*time.Minute {
		t.Fatalf("after two sleeps of a minute: err %v, clock at %v, want nil and 2m", err, c.Elapsed())
	}
}
