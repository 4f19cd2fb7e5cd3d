package admission

// The room a class has: the bounds on requests in flight (the engines'
// limit, --max-concurrent-requests) less the reserved slots of the classes
// above it that they leave unused, or with Lend what a class takes back
// of its own. The room rule (rules.go) asks it.

// roomHold says what bound, if any, leaves no room at all.
func (s *Scheduler) roomHold() Hold {
	switch {
	case s.limit >= 0 && s.inflight >= s.limit:
		return HeldBySaturation
	case s.cfg.MaxInFlight > 0 && s.inflight >= s.cfg.MaxInFlight:
		return HeldByLimit
	}
	return HeldByNothing
}

// classHasRoom reports whether class c may take a slot: one is left after
// the unused reservations of the classes above it; with Lend, one is left
// at all, or c takes back a reserved slot of its own that a lower class
// borrowed.
func (s *Scheduler) classHasRoom(c Class) bool {
	room := s.room()
	switch {
	case room < 0:
		return true
	case !s.cfg.Lend:
		return s.inflight+unusedAbove(c, s.reserved, s.inflightBy) < room
	case s.inflight < room:
		return true
	}
	return s.reclaims(c)
}

// room is the bound on requests in flight: the smaller of the engines'
// limit and MaxInFlight, -1 for none.
func (s *Scheduler) room() int {
	room := -1
	if s.limit >= 0 {
		room = s.limit
	}
	if s.cfg.MaxInFlight > 0 && (room < 0 || s.cfg.MaxInFlight < room) {
		room = s.cfg.MaxInFlight
	}
	return room
}

// unusedAbove counts the reserved slots the classes above c leave unused,
// of reserved per class with inflight in flight.
func unusedAbove(c Class, reserved, inflight []int) int {
	held := 0
	for k := 0; k < int(c); k++ {
		held += max(0, reserved[k]-inflight[k])
	}
	return held
}

// reclaims reports whether class c, short of its reserved slots, may go
// over the engines' limit by what the classes below it borrowed of the
// slots reserved for c and above: the engine queues it first, by priority,
// for the next slot a borrower frees.
// MaxInFlight is never passed.
func (s *Scheduler) reclaims(c Class) bool {
	if s.limit < 0 || s.inflightBy[c] >= s.reserved[c] ||
		s.cfg.MaxInFlight > 0 && s.inflight >= s.cfg.MaxInFlight {
		return false
	}
	reservedUp, below := 0, 0
	for k := range s.bands {
		if k <= int(c) {
			reservedUp += s.reserved[k]
		} else {
			below += s.inflightBy[k]
		}
	}
	borrowed := below - max(0, s.limit-reservedUp)
	return s.inflight < s.limit+borrowed
}
