// Package testwait is the one way a test here waits for something it cannot be told about: it
// polls a condition until it holds or a deadline passes, then fails the test with a message
// that says what never happened. Tests that can be told (a channel, a callback) or that can move
// time themselves (an injected clock, testing/synctest) do that instead.
//
// The poll starts at a millisecond and backs off to a tenth of a second, so a condition that
// holds soon is seen soon and one that takes seconds costs few polls. Inside a
// testing/synctest bubble the waits are on the bubble's clock, so polling there takes no real
// time.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

const (
	firstPoll = time.Millisecond
	lastPoll  = 100 * time.Millisecond
)

// Eventually polls cond until it returns true and returns how long that took. If within
// passes first, it fails t (from the test's goroutine, as t.Fatal requires) with msgf
// formatted with args, saying what never happened.
func Eventually(t testing.TB, within time.Duration, cond func() bool, msgf string, args ...any) time.Duration {
	t.Helper()
	took, ok := poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if !ok {
		t.Fatalf("timed out after %v waiting until %s", within, fmt.Sprintf(msgf, args...))
	}
	return took
}

// EventuallyNil polls cond until it returns nil and returns how long that took. If within
// passes first, it fails t with msgf formatted with args and cond's last error.
func EventuallyNil(t testing.TB, within time.Duration, cond func() error, msgf string, args ...any) time.Duration {
	t.Helper()
	var last error
	took, ok := poll(within, func() error {
		last = cond()
		return last
	})
	if !ok {
		t.Fatalf("timed out after %v waiting until %s: %v", within, fmt.Sprintf(msgf, args...), last)
	}
	return took
}

// Holds polls cond until it returns true or within passes, and reports whether it held: for a
// test that has something to say (or to do) when it never does.
func Holds(within time.Duration, cond func() bool) bool {
	_, ok := poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	return ok
}

// errNotYet is what a boolean condition that does not hold yet reports to poll.
var errNotYet = fmt.Errorf("not yet")

// poll calls try until it returns nil (true, with the time taken) or within has passed since
// the first call (false). The condition is tried once more at the deadline, so a wait that
// overslept under load still sees a condition that holds by then.
func poll(within time.Duration, try func() error) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(within)
	wait := firstPoll
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if try() == nil {
			return time.Since(start), true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return time.Since(start), false
		}
		timer.Reset(min(wait, left))
		<-timer.C
		wait = min(2*wait, lastPoll)
	}
}
