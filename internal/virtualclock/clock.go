// Package virtualclock is virtual time behind k8s.io/utils/clock's interfaces, for code that
// must run on time nobody waits for: the fleet simulator, whose event loop jumps the clock from
// one event to the next, and tests whose code sleeps (a load generator's think times), where a
// Sleep moves the clock instead of waiting.
//
// Everything else uses k8s.io/utils/clock directly: clock.RealClock in the product and
// k8s.io/utils/clock/testing's FakeClock in tests that step time by hand. What this clock adds
// over that fake is an epoch with Elapsed and AdvanceTo (the simulator's unit), a lock-free Now
// for a simulator that reads it on every routing decision, timers fired in deadline order each
// at its own instant, and SleepContext, a Sleep that a context can end.
package virtualclock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Clock is a clock that moves only when told to: by Advance, AdvanceTo, Sleep or SleepContext.
// Its instants are its epoch plus the elapsed virtual duration; it never moves backwards.
// Timers, tickers and AfterFunc functions fire as the clock passes their deadlines, in deadline
// order, on the goroutine that moves the clock (an AfterFunc function runs there too, with no
// lock held, so it may read or move the clock). Safe for concurrent use.
type Clock struct {
	epoch   time.Time
	elapsed atomic.Int64 // nanoseconds since epoch

	mu      sync.Mutex
	waiters []*waiter
	// pending is len(waiters), kept under mu and read without it: a clock with nothing to fire
	// (the simulator's) moves without taking mu.
	pending atomic.Int32
}

var _ clock.WithTickerAndDelayedExecution = (*Clock)(nil)

// waiter is one pending timer, ticker or AfterFunc.
type waiter struct {
	at       time.Duration // elapsed time it is due at
	interval time.Duration // a ticker's period; 0 for one-shot waiters
	c        chan time.Time
	f        func()
}

// New returns a clock standing at epoch.
func New(epoch time.Time) *Clock { return &Clock{epoch: epoch} }

// Now returns the current virtual instant.
func (c *Clock) Now() time.Time { return c.epoch.Add(c.Elapsed()) }

// Since returns the virtual time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Elapsed returns the virtual time since the epoch.
func (c *Clock) Elapsed() time.Duration { return time.Duration(c.elapsed.Load()) }

// Advance moves the clock forward by d (a negative d is ignored), firing what falls due.
func (c *Clock) Advance(d time.Duration) {
	if d > 0 {
		c.advanceTo(c.Elapsed()+d, nil)
	}
}

// AdvanceTo moves the clock to elapsed since the epoch, firing what falls due; it never moves
// backwards.
func (c *Clock) AdvanceTo(elapsed time.Duration) { c.advanceTo(elapsed, nil) }

// Sleep moves the clock forward by d at once, firing what falls due, as k8s' FakeClock does.
func (c *Clock) Sleep(d time.Duration) { c.Advance(d) }

// SleepContext moves the clock forward by d, firing what falls due; it stops early, at the
// instant a fired function ended ctx, and then returns ctx.Err(). A ctx already done returns at
// once.
func (c *Clock) SleepContext(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.advanceTo(c.Elapsed()+d, ctx)
	}
	return ctx.Err()
}

// After returns a channel that receives the time once d has passed.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// NewTimer returns a timer that fires once d has passed; d <= 0 fires at once.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	return c.arm(&waiter{c: make(chan time.Time, 1)}, d)
}

// AfterFunc calls f once d has passed, on the goroutine that moves the clock there, unless the
// returned timer is stopped first.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.arm(&waiter{f: f}, d)
}

// Tick returns the channel of a new ticker; d <= 0 returns nil, as time.Tick does.
func (c *Clock) Tick(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return c.NewTicker(d).C()
}

// NewTicker returns a ticker that delivers the time every d. Like time.Ticker, a tick nobody
// took yet is not doubled: a slow reader misses ticks. It panics if d <= 0, as time.NewTicker
// does.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("virtualclock: non-positive interval for NewTicker")
	}
	t := c.arm(&waiter{c: make(chan time.Time, 1), interval: d}, d)
	return ticker{t}
}

// Waiters returns how many timers, tickers and AfterFunc functions are pending, so that a test
// can wait for code to arm one before it moves the clock.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// arm schedules w d from now; one due already fires at once.
func (c *Clock) arm(w *waiter, d time.Duration) *timer {
	c.mu.Lock()
	c.waiters = append(c.waiters, w)
	c.pending.Store(int32(len(c.waiters))) // before reading the time: see advanceTo
	w.at = c.Elapsed() + max(d, 0)
	c.mu.Unlock()
	if d <= 0 {
		c.advanceTo(c.Elapsed(), nil)
	}
	return &timer{clock: c, w: w}
}

// advanceTo moves the clock to target, firing due waiters one at a time in deadline order, the
// clock standing at each one's deadline while it fires. It stops early when ctx (if not nil) is
// done after a firing.
func (c *Clock) advanceTo(target time.Duration, ctx context.Context) {
	if c.pending.Load() == 0 {
		c.moveTo(target)
		// A waiter armed meanwhile either read the time after the move (so is not overdue) or
		// is counted by now, and then the loop below fires it.
		if c.pending.Load() == 0 {
			return
		}
	}
	for {
		c.mu.Lock()
		w := c.nextDue(target)
		if w == nil {
			c.moveTo(target)
			c.mu.Unlock()
			return
		}
		c.moveTo(w.at)
		now := c.Now()
		if w.interval > 0 {
			w.at += w.interval
		} else {
			c.remove(w)
		}
		c.mu.Unlock()
		w.fire(now)
		if ctx != nil && ctx.Err() != nil {
			return
		}
	}
}

// moveTo sets the elapsed time to at unless that is in the past.
func (c *Clock) moveTo(at time.Duration) {
	for {
		cur := c.elapsed.Load()
		if int64(at) <= cur || c.elapsed.CompareAndSwap(cur, int64(at)) {
			return
		}
	}
}

// nextDue returns the earliest waiter due by target, nil if none. Called with mu held.
func (c *Clock) nextDue(target time.Duration) *waiter {
	var next *waiter
	for _, w := range c.waiters {
		if w.at <= target && (next == nil || w.at < next.at) {
			next = w
		}
	}
	return next
}

// remove drops w from the pending waiters and reports whether it was there. Called with mu
// held.
func (c *Clock) remove(w *waiter) bool {
	i := slices.Index(c.waiters, w)
	if i < 0 {
		return false
	}
	c.waiters = slices.Delete(c.waiters, i, i+1)
	c.pending.Store(int32(len(c.waiters)))
	return true
}

// fire delivers now to w's channel (dropped if the last one was not taken) or calls its
// function.
func (w *waiter) fire(now time.Time) {
	if w.f != nil {
		w.f()
		return
	}
	select {
	case w.c <- now:
	default:
	}
}

// timer is a pending waiter's handle.
type timer struct {
	clock *Clock
	w     *waiter
}

// C returns the timer's channel; nil for an AfterFunc timer, as time.AfterFunc's is.
func (t *timer) C() <-chan time.Time { return t.w.c }

// Stop cancels the timer and reports whether that kept it from firing.
func (t *timer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.remove(t.w)
}

// Reset rearms the timer to fire d from now and reports whether it was still pending.
func (t *timer) Reset(d time.Duration) bool {
	was := t.Stop()
	t.clock.arm(t.w, d)
	return was
}

// ticker adapts a repeating timer to clock.Ticker.
type ticker struct{ t *timer }

func (k ticker) C() <-chan time.Time { return k.t.C() }
func (k ticker) Stop()               { k.t.Stop() }
