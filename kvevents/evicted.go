package kvevents

import "time"

// maxEvictions bounds the removals an evictions log keeps: a decision's
// reservation lasts a couple of seconds, and an engine evicting faster than
// this many blocks in that time makes the log say "evicted" for every
// prompt (its oldest entry is then younger than the decision), which is the
// safe answer.
const maxEvictions = 1024

// evictions remembers when the engine last removed each block lately, and
// when its set was last emptied, so that a decision made before an eviction
// is not taken for blocks the engine has yet to store. Bounded in entries
// and so in bytes: the oldest entries go first, and a question about a time
// older than the oldest entry kept is answered "evicted". Guarded by its
// owner's lock.
type evictions struct {
	at      map[Key]time.Time
	order   []Key // keys in the order they were stamped, a FIFO
	resets  uint64
	resetAt time.Time
	// lostAt is the stamp of the newest entry dropped for room: what the log
	// no longer knows happened before then.
	lostAt  time.Time
	scratch []Key
}

// note stamps what set removed since the last note at now.
func (e *evictions) note(set *Set, now time.Time) {
	var resets uint64
	e.scratch, resets = set.TakeRemoved(e.scratch[:0])
	if resets != e.resets {
		e.resets, e.resetAt = resets, now
	}
	if len(e.scratch) == 0 {
		return
	}
	if e.at == nil {
		e.at = map[Key]time.Time{}
	}
	for _, k := range e.scratch {
		if _, ok := e.at[k]; !ok {
			e.order = append(e.order, k)
		}
		e.at[k] = now
	}
	for len(e.order) > maxEvictions {
		e.lostAt = e.at[e.order[0]]
		delete(e.at, e.order[0])
		e.order = e.order[1:]
	}
	if cap(e.order) > 4*maxEvictions {
		e.order = append([]Key(nil), e.order...)
	}
}

// since reports whether any of keys was removed, or the whole set emptied,
// at or after t.
func (e *evictions) since(keys []Key, t time.Time) bool {
	switch {
	case !e.resetAt.IsZero() && !e.resetAt.Before(t):
		return true
	case !e.lostAt.IsZero() && !e.lostAt.Before(t):
		return true
	}
	for _, k := range keys {
		if at, ok := e.at[k]; ok && !at.Before(t) {
			return true
		}
	}
	return false
}
