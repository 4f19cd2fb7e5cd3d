package affinity

import (
	"sync"
	"time"
)

// A prefix is hot when many requests share it at once: forty rollouts of one
// task, or every session's first turn on one system prompt. Affinity sends
// them all to the prefix's owner, and under the balance thresholds (64
// requests above the least loaded) they queue there while the rest of the
// fleet idles. A hot prefix instead spreads to a second owner, a third and
// so on while they are all loaded (Thresholds.HotLoad, HotOwners): the next
// workers in the rendezvous order of its block, so every replica picks the
// same ones. Its heat is how many
// hits it had lately; a worker that is merely busy with other prefixes does
// not make a conversation hot, so sessions are not moved off their caches.

// hotWindow is the span heat is counted over: hits of the current window
// plus those of the previous one, fading linearly, so a prefix cools within
// two windows of its last hit.
const hotWindow = time.Second

// heat counts the hits of each prefix (its deepest matched block) in the
// current and the previous window. Two maps, swapped on a new window, keep
// it bounded by the prefixes hit in two windows.
type heat struct {
	mu        sync.Mutex
	window    int64 // the current window's number
	cur, prev map[uint64]int64
}

// note counts one hit of the prefix key at now.
func (h *heat) note(key uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roll(now)
	if h.cur == nil {
		h.cur = make(map[uint64]int64)
	}
	h.cur[key]++
}

// of is the prefix's recent hits at now: the current window's and the
// previous one's weighted by how much of the current window is still ahead.
func (h *heat) of(key uint64, now time.Time) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roll(now)
	elapsed := float64(now.UnixNano()-h.window*int64(hotWindow)) / float64(hotWindow)
	return float64(h.cur[key]) + float64(h.prev[key])*(1-elapsed)
}

// roll moves to now's window, forgetting what is older than the previous one.
func (h *heat) roll(now time.Time) {
	w := now.UnixNano() / int64(hotWindow)
	switch {
	case w == h.window:
	case w == h.window+1:
		h.prev, h.cur, h.window = h.cur, nil, w
	default:
		h.prev, h.cur, h.window = nil, nil, w
	}
}
