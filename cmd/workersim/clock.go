package main

import "time"

// clock is the wall clock the engine driver reads; tests substitute a fake one.
type clock interface {
	Now() time.Time
	// NewTimerAt returns a timer that fires at deadline, at once if it has passed. A deadline
	// rather than a duration, so that a caller that computed it from one reading of Now gets
	// exactly that instant even if the clock moved since.
	NewTimerAt(deadline time.Time) clockTimer
}

// clockTimer fires once on C at its deadline unless stopped.
type clockTimer interface {
	C() <-chan time.Time
	Stop() bool
}

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) NewTimerAt(deadline time.Time) clockTimer {
	return wallTimer{time.NewTimer(time.Until(deadline))}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time { return w.t.C }
func (w wallTimer) Stop() bool          { return w.t.Stop() }
