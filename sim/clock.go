package sim

import (
	"sync/atomic"
	"time"
)

// VirtualClock is a clock that moves only when told to, for code that reads the time through a
// Now() method (the affinity policies) while a simulation drives time. Its instants are Epoch
// plus the elapsed virtual duration. Safe for concurrent use.
type VirtualClock struct {
	epoch   time.Time
	elapsed atomic.Int64 // nanoseconds since epoch
}

// NewVirtualClock returns a clock standing at epoch.
func NewVirtualClock(epoch time.Time) *VirtualClock {
	return &VirtualClock{epoch: epoch}
}

// Now returns the current virtual instant.
func (c *VirtualClock) Now() time.Time {
	return c.epoch.Add(c.Elapsed())
}

// Elapsed returns the virtual time since the epoch, the unit [Engine] works in.
func (c *VirtualClock) Elapsed() time.Duration {
	return time.Duration(c.elapsed.Load())
}

// AdvanceTo moves the clock to elapsed since the epoch; it never moves backwards.
func (c *VirtualClock) AdvanceTo(elapsed time.Duration) {
	for {
		cur := c.elapsed.Load()
		if int64(elapsed) <= cur || c.elapsed.CompareAndSwap(cur, int64(elapsed)) {
			return
		}
	}
}

// Advance moves the clock forward by d (negative d is ignored).
func (c *VirtualClock) Advance(d time.Duration) {
	if d > 0 {
		c.elapsed.Add(int64(d))
	}
}
