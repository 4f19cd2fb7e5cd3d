package kvevents

import "time"

// Trust is whether a worker's set may be routed on now, and if not why:
// every state but Trusted sends that worker's requests to the text index.
type Trust uint8

// The states of a worker's stream, as Subscriber.Trust judges them.
const (
	// Trusted: connected, in order, and heard lately whenever the engine had
	// work that should have stored blocks.
	Trusted Trust = iota
	// Disconnected: never connected yet, or the connection dropped.
	Disconnected
	// Replaying: a gap is being fetched from the replay socket.
	Replaying
	// Recovering: the set was emptied lately (the engine restarted, a gap
	// could not be filled, a batch did not decode): it holds less than the
	// engine until the stale window has passed.
	Recovering
	// Stale: the engine had work for longer than the stale window and
	// published nothing: it may have stopped publishing.
	Stale
)

// Trusts lists every state, for metrics.
var Trusts = []Trust{Trusted, Disconnected, Replaying, Recovering, Stale}

func (t Trust) String() string {
	return [...]string{"trusted", "disconnected", "replaying", "recovering", "stale"}[t]
}

// DefaultStaleAfter is SubscriberConfig.StaleAfter's default.
const DefaultStaleAfter = 10 * time.Second

// watch is what a Subscriber knows of its stream's health, under its lock.
type watch struct {
	connected bool
	replaying bool
	heard     time.Time // the last batch applied
	resetAt   time.Time // the last time the set lost blocks it may have had
	expecting time.Time // the first request routed since heard; zero if none
	resets    uint64    // Lost + Rewinds + Malformed when last looked at
}

// note updates the watch after the stream took batches at now.
func (w *watch) note(st Stats, now time.Time, applied bool) {
	if r := st.Lost + st.Rewinds + st.Malformed; r != w.resets {
		w.resets, w.resetAt = r, now
	}
	if applied {
		w.heard, w.expecting = now, time.Time{}
	}
}

// expect notes that the engine was given work that should store blocks.
func (w *watch) expect(now time.Time) {
	if w.expecting.IsZero() {
		w.expecting = now
	}
}

// trust judges the stream at now.
func (w *watch) trust(now time.Time, staleAfter time.Duration) Trust {
	switch {
	case !w.connected:
		return Disconnected
	case w.replaying:
		return Replaying
	case !w.resetAt.IsZero() && now.Sub(w.resetAt) < staleAfter:
		return Recovering
	case !w.expecting.IsZero() && now.Sub(w.expecting) > staleAfter:
		return Stale
	}
	return Trusted
}
