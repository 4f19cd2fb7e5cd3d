package health

import (
	"sync"
	"time"
)

// Clock tells the Monitor what time it is. The Monitor calls Now on the request
// path (Begin, Progress, End), so it must be cheap and safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// SystemClock is the process clock. Its readings carry Go's monotonic clock, so
// verdict timing is immune to wall-clock steps.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// FakeClock is a Clock that moves only when Advance is called, for tests of this
// package and of packages that drive a Monitor. Safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start}
}

// Now returns the clock's current reading.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored, because the
// Monitor assumes time never runs backwards.
func (c *FakeClock) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
