package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// TestAnIdleConnectionPastItsLastDeadlineIsReused: a pooled connection
// keeps the deadline of its last exchange; once that passed, the look at
// it before reuse must not take the expired deadline for a broken socket.
func TestAnIdleConnectionPastItsLastDeadlineIsReused(t *testing.T) {
	u, c, _ := dialedUpstream(t) // the server end stays open, silent
	past := time.Now().Add(-time.Millisecond)
	if err := c.SetDeadline(past); err != nil {
		t.Fatal(err)
	}
	c.deadline = past
	now := time.Now()
	u.release(c, true, now)
	if got := u.takeIdle(now); got != c {
		t.Fatal("a quiet idle connection was not reused")
	}
	u.release(c, true, now)
}

// dialedUpstream is an upstream pool to a loopback listener, one connection
// it dialled, and the server's end of that connection; all are closed when
// the test ends.
func dialedUpstream(t *testing.T) (*upstream, *upConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := newUpstream(ln.Addr().String(), false, time.Second, 4, &workerurl.Dialer{})
	t.Cleanup(u.close)
	c, err := u.dial(t.Context(), time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return u, c, server
}
