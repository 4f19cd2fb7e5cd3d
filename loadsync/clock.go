package loadsync

import "time"

// Clock is Gossip's source of time: timestamps for reports and expiry, and
// the ticker that paces them. Tests pass a clock they advance by hand.
type Clock interface {
	Now() time.Time
	// NewTicker returns a channel that delivers a time every d, and a
	// function that stops it.
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTicker wraps time.NewTicker.
func (SystemClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
