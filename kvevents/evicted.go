package kvevents

import "time"

// evictions remembers when the engine last removed each block lately, and
// when its set was last emptied, so that a decision made before an eviction
// is not taken for blocks the engine has yet to store. Bounded: the oldest
// entries go first. Guarded by its Subscriber's lock.
type evictions struct {
	at      map[uint64]time.Time
	order   []uint64 // keys in the order they were stamped, a FIFO
	limit   int
	resets  uint64
	resetAt time.Time
	scratch []uint64
}

// note stamps what set removed since the last note at now.
func (e *evictions) note(set *Set, now time.Time) {
	if e.at == nil {
		e.at, e.limit = map[uint64]time.Time{}, max(set.limit, 1)
	}
	var resets uint64
	e.scratch, resets = set.TakeRemoved(e.scratch[:0])
	if resets != e.resets {
		e.resets, e.resetAt = resets, now
	}
	for _, k := range e.scratch {
		if _, ok := e.at[k]; !ok {
			e.order = append(e.order, k)
		}
		e.at[k] = now
	}
	for len(e.order) > e.limit {
		delete(e.at, e.order[0])
		e.order = e.order[1:]
	}
}

// since reports whether any of keys was removed, or the whole set emptied,
// at or after t.
func (e *evictions) since(keys []uint64, t time.Time) bool {
	if !e.resetAt.IsZero() && !e.resetAt.Before(t) {
		return true
	}
	for _, k := range keys {
		if at, ok := e.at[k]; ok && !at.Before(t) {
			return true
		}
	}
	return false
}
