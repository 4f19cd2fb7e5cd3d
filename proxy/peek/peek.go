package peek

import (
	"net"
	"syscall"
)

// State is what a look at a socket's receive queue found, without
// consuming any of it: the bytes stay for whoever reads the connection next
// (fasthttp's parser of a pipelined request, or the next response on a
// pooled upstream connection).
type State int

const (
	Empty   State = iota // nothing to read (only from a look that does not wait)
	Data                 // bytes wait to be read
	EOF                  // the peer sent FIN: it closed, or only half-closed
	Error                // a reset, a closed socket, or the wait was interrupted
	Unknown              // not a socket that can be looked at
)

// socketOf unwraps conn down to the socket that carries it: through TLS and
// through the proxy's own connection wrappers (anything with NetConn).
func socketOf(conn net.Conn) (syscall.Conn, bool) {
	for {
		if sc, ok := conn.(syscall.Conn); ok {
			return sc, true
		}
		inner, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		conn = inner.NetConn()
	}
}

// RawConn is the raw socket under conn, or nil when there is none to look
// at.
func RawConn(conn net.Conn) syscall.RawConn {
	sc, ok := socketOf(conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// Look looks at conn's receive queue. With wait it blocks, in the runtime's
// poller, until something arrives, the peer closes, or the read deadline set
// on conn passes (peekError then).
func Look(conn net.Conn, wait bool) State {
	raw := RawConn(conn)
	if raw == nil {
		return Unknown
	}
	return lookRaw(raw, wait)
}

// lookRaw is Look on a raw socket.
func lookRaw(raw syscall.RawConn, wait bool) State {
	state := Unknown
	err := raw.Read(func(fd uintptr) bool {
		var more bool
		state, more = FD(fd)
		return !(more && wait)
	})
	if err != nil {
		return Error
	}
	return state
}
