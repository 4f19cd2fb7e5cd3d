//go:build !unix

package proxy

// peekFD cannot look at sockets here: callers fall back to what needs no
// peeking (no disconnect watch, no idle check).
func peekFD(uintptr) (peekState, bool) { return peekUnknown, false }
