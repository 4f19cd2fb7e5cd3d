package main

import (
	"context"
	"time"
)

// Clock is the time source of a run: the replay schedule, think times, the --duration cap, the
// per-request timeout and the latency measurements all read it, so a test can run a schedule on
// virtual time. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err(). d <= 0 returns at once.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine once d has passed, unless stop is called first;
	// stop reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// withClockTimeout is context.WithTimeout on a Clock: the returned context is cancelled with
// cause when d has passed on clock. The cancel function must be called to release it.
func withClockTimeout(ctx context.Context, clock Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := clock.AfterFunc(d, func() { cancel(cause) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}
