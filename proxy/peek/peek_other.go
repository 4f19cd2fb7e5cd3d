//go:build !unix

package peek

// FD cannot look at sockets here: callers fall back to what needs no
// peeking (no disconnect watch, no idle check).
func FD(uintptr) (State, bool) { return Unknown, false }
