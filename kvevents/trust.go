package kvevents

import "time"

// Trust is whether a worker's set may be routed on now, and if not why:
// every state but Trusted sends that worker's requests to the text index.
type Trust uint8

// The states of a worker's view, as View.Trust judges them.
const (
	// Trusted: heard, in order, and heard lately whenever the engine had
	// work that should have stored blocks.
	Trusted Trust = iota
	// Disconnected: nothing hears the engine: no connection of this
	// replica's, and no peer that says it hears it.
	Disconnected
	// Replaying: a gap is being fetched from the replay socket or a peer.
	Replaying
	// Recovering: the set was emptied lately (the engine restarted, a gap
	// could not be filled, a batch did not decode): it holds less than the
	// engine until the stale window has passed.
	Recovering
	// Stale: the engine had work for longer than the stale window and
	// published nothing: it may have stopped publishing.
	Stale
	// Unheard: connected (or told of by a peer), and nothing heard since:
	// a stream that never publishes is not an empty cache, and one that
	// reconnected has yet to show it comes from the same engine.
	Unheard
)

// Trusts lists every state, for metrics.
var Trusts = []Trust{Trusted, Disconnected, Replaying, Recovering, Stale, Unheard}

func (t Trust) String() string {
	return [...]string{"trusted", "disconnected", "replaying", "recovering", "stale", "unheard"}[t]
}

// DefaultStaleAfter is the default of the stale window.
const DefaultStaleAfter = 10 * time.Second

// watch is what a View knows of its stream's health, under its lock.
type watch struct {
	connected bool      // this replica has a connection to the engine
	relayedTo time.Time // a peer says it hears the engine, until then
	heard     bool      // a batch, a repaired gap or a snapshot since the last (re)join
	replaying bool
	last      time.Time // the last batch applied
	resetAt   time.Time // the last time the set lost blocks it may have had
	expecting time.Time // the first request routed since last; zero if none
	busySince time.Time // since when the engine reports running requests; zero if idle
	resets    uint64    // Stats.resets() when last looked at
}

// note updates the watch after the stream took batches at now; applied
// says a batch was applied (or a gap repaired), which the engine's
// silence is judged from.
func (w *watch) note(st Stats, now time.Time, applied bool) {
	if r := st.resets(); r != w.resets {
		w.resets, w.resetAt = r, now
	}
	if applied {
		w.heard, w.last, w.expecting = true, now, time.Time{}
	}
}

// expect notes that the engine was given work that should store blocks.
func (w *watch) expect(now time.Time) {
	if w.expecting.IsZero() {
		w.expecting = now
	}
}

// busy notes what the engine says it runs, at now.
func (w *watch) busy(running bool, now time.Time) {
	switch {
	case !running:
		w.busySince = time.Time{}
	case w.busySince.IsZero():
		w.busySince = now
	}
}

// silent says whether the engine had work for longer than staleAfter and
// published nothing meanwhile: work the router gave it, or requests it
// reports running (those that reach it without passing the router too).
func (w *watch) silent(now time.Time, staleAfter time.Duration) bool {
	if !w.expecting.IsZero() && now.Sub(w.expecting) > staleAfter {
		return true
	}
	if w.busySince.IsZero() {
		return false
	}
	since := w.busySince
	if w.last.After(since) {
		since = w.last
	}
	return now.Sub(since) > staleAfter
}

// trust judges the stream at now.
func (w *watch) trust(now time.Time, staleAfter time.Duration) Trust {
	switch {
	case !w.connected && !now.Before(w.relayedTo):
		return Disconnected
	case w.replaying:
		return Replaying
	case !w.heard:
		return Unheard
	case !w.resetAt.IsZero() && now.Sub(w.resetAt) < staleAfter:
		return Recovering
	case w.silent(now, staleAfter):
		return Stale
	}
	return Trusted
}
