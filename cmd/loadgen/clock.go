package main

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Clock is the time source of a run: the replay schedule, think times, the --duration cap, the
// per-request timeout and the latency measurements all read it, so a test can run a schedule on
// virtual time. clock.RealClock{} outside tests.
type Clock = clock.WithDelayedExecution

// contextSleeper is a clock that sleeps under a context itself: virtual time, where a sleep moves
// the clock at once (and must stop where a timer it fires ends the context) rather than wait.
type contextSleeper interface {
	SleepContext(ctx context.Context, d time.Duration) error
}

// sleep waits d on clk, or until ctx is done and then returns ctx.Err(). d <= 0 returns at once.
func sleep(ctx context.Context, clk Clock, d time.Duration) error {
	if s, ok := clk.(contextSleeper); ok {
		return s.SleepContext(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	timer := clk.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C():
		return nil
	}
}

// withClockTimeout is context.WithTimeout on a Clock: the returned context is cancelled with
// cause when d has passed on clk. The cancel function must be called to release it.
func withClockTimeout(ctx context.Context, clk Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := clk.AfterFunc(d, func() { cancel(cause) })
	return ctx, func() {
		timer.Stop()
		cancel(context.Canceled)
	}
}
