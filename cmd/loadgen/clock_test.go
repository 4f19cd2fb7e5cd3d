package main

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/virtualclock"
)

// newVirtualClock returns virtual time for a run: a sleep moves it at once (firing the timers
// it passes), so a schedule runs as fast as the code allows while every reading of Now is
// exact. Tests may also move it with Advance.
func newVirtualClock() *virtualclock.Clock {
	return virtualclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

func TestRealClockSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleep(ctx, clock.RealClock{}, time.Hour); err != context.Canceled {
		t.Fatalf("sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := sleep(context.Background(), clock.RealClock{}, 0); err != nil {
		t.Fatalf("sleep(0) = %v", err)
	}
}

func TestVirtualSleepMovesTheClockInsteadOfWaiting(t *testing.T) {
	vc := newVirtualClock()
	start := vc.Now()
	if err := sleep(context.Background(), vc, time.Hour); err != nil || vc.Since(start) != time.Hour {
		t.Fatalf("sleep of an hour on virtual time: err %v, clock moved %v; want nil, 1h", err, vc.Since(start))
	}
}

func TestWithClockTimeoutCancelsWithItsCause(t *testing.T) {
	clock := newVirtualClock()
	ctx, cancel := withClockTimeout(context.Background(), clock, time.Second, errRequestTimeout)
	defer cancel()
	clock.Advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("cancelled before its time")
	}
	clock.Advance(time.Millisecond)
	if context.Cause(ctx) != errRequestTimeout {
		t.Fatalf("cause = %v, want errRequestTimeout", context.Cause(ctx))
	}
}

func TestWithClockTimeoutCancelReleasesTheTimer(t *testing.T) {
	clock := newVirtualClock()
	_, cancel := withClockTimeout(context.Background(), clock, time.Second, errRequestTimeout)
	cancel()
	if n := clock.Waiters(); n != 0 {
		t.Fatalf("%d timers left after cancel", n)
	}
}
