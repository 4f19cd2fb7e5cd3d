package main

import (
	"errors"
	"net"
	"os"
	"time"
)

// errClientGone: the client closed its connection before the answer was complete.
var errClientGone = errors.New("client went away")

// longAgo is a read deadline in the past, which makes a blocked Read return at once.
var longAgo = time.Unix(1, 0)

// connWatcher notices a client that closes its connection while the worker is busy with its
// request: a one-byte read on an idle HTTP/1.1 connection blocks until the peer closes it. The
// watcher's goroutine is owned by whoever calls watchConn, and ended and waited for by Stop.
type connWatcher struct {
	conn  net.Conn
	gone  chan struct{}
	done  chan struct{}
	stray bool // the read returned data (a pipelined request): the connection cannot be reused
}

// watchConn starts watching conn; a nil conn is never gone.
func watchConn(conn net.Conn) *connWatcher {
	w := &connWatcher{conn: conn, gone: make(chan struct{}), done: make(chan struct{})}
	if conn == nil {
		close(w.done)
		return w
	}
	go w.run()
	return w
}

func (w *connWatcher) run() {
	defer close(w.done)
	var b [1]byte
	n, err := w.conn.Read(b[:])
	switch {
	case n > 0:
		w.stray = true
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		close(w.gone)
	}
}

// Gone is closed when the client has closed the connection.
func (w *connWatcher) Gone() <-chan struct{} { return w.gone }

// Stop ends the watch and waits for it, leaving the connection as it was. It reports whether the
// watch consumed a byte of the next request, in which case the connection must be closed after
// the response.
func (w *connWatcher) Stop() (stray bool) {
	if w.conn == nil {
		return false
	}
	_ = w.conn.SetReadDeadline(longAgo)
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
	return w.stray
}
