package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// virtualClock is a Clock on virtual time. Sleep does not wait: it moves time forward by its
// duration at once (firing the timers it passes), so a schedule runs as fast as the code allows
// while every reading of Now is exact. Tests may also move time with advance. Safe for
// concurrent use.
type virtualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*virtualTimer
}

type virtualTimer struct {
	at time.Time
	f  func()
}

func newVirtualClock() *virtualClock {
	return &virtualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advanceUntil(c.Now().Add(d), ctx)
	return ctx.Err()
}

func (c *virtualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	timer := &virtualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, timer)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, timer)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		return true
	}
}

// advance moves time forward by d, firing the timers due on the way.
func (c *virtualClock) advance(d time.Duration) {
	c.advanceUntil(c.Now().Add(d), context.Background())
}

// advanceUntil moves time to target, firing due timers in order; it stops early, at the firing
// time, if a timer's function ends ctx.
func (c *virtualClock) advanceUntil(target time.Time, ctx context.Context) {
	for {
		c.mu.Lock()
		next := c.nextDue(target)
		if next == nil {
			c.now = maxTime(c.now, target)
			c.mu.Unlock()
			return
		}
		c.now = maxTime(c.now, next.at)
		c.timers = slices.DeleteFunc(c.timers, func(t *virtualTimer) bool { return t == next })
		c.mu.Unlock()
		next.f()
		if ctx.Err() != nil {
			return
		}
	}
}

// nextDue returns the earliest timer due by target, nil if none. Called with mu held.
func (c *virtualClock) nextDue(target time.Time) *virtualTimer {
	var next *virtualTimer
	for _, t := range c.timers {
		if !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
			next = t
		}
	}
	return next
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func TestRealClockSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (realClock{}).Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := (realClock{}).Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
}

func TestWithClockTimeoutCancelsWithItsCause(t *testing.T) {
	clock := newVirtualClock()
	ctx, cancel := withClockTimeout(context.Background(), clock, time.Second, errRequestTimeout)
	defer cancel()
	clock.advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("cancelled before its time")
	}
	clock.advance(time.Millisecond)
	if context.Cause(ctx) != errRequestTimeout {
		t.Fatalf("cause = %v, want errRequestTimeout", context.Cause(ctx))
	}
}

func TestWithClockTimeoutCancelReleasesTheTimer(t *testing.T) {
	clock := newVirtualClock()
	_, cancel := withClockTimeout(context.Background(), clock, time.Second, errRequestTimeout)
	cancel()
	clock.mu.Lock()
	defer clock.mu.Unlock()
	if len(clock.timers) != 0 {
		t.Fatalf("%d timers left after cancel", len(clock.timers))
	}
}
