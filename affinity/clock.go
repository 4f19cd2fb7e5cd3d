package affinity

import "time"

// Clock tells the time. The router uses SystemClock; the fleet simulator and
// the tests pass a virtual clock so that nothing here depends on wall time.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
