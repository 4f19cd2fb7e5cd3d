package proxy

import (
	"net"
	"sync/atomic"
	"time"
)

// clientWatch notices a client that hangs up while its request is in
// flight. fasthttp does not read from a connection while a handler runs, so
// a one-byte read on it returns only when the client closes (or, rarely,
// pipelines its next request, which then cannot be served on this
// connection).
type clientWatch struct {
	conn      net.Conn
	gone      func()
	stopping  atomic.Bool
	pipelined atomic.Bool
	done      chan struct{}
}

// watchClient starts watching conn; gone is called once if the client leaves.
func watchClient(conn net.Conn, gone func()) *clientWatch {
	w := &clientWatch{conn: conn, gone: gone, done: make(chan struct{})}
	go w.run()
	return w
}

func (w *clientWatch) run() {
	defer close(w.done)
	var b [1]byte
	n, _ := w.conn.Read(b[:])
	switch {
	case n > 0:
		w.pipelined.Store(true)
	case !w.stopping.Load():
		w.gone()
	}
}

// stop ends the watch and waits for it. It reports whether the client sent
// more bytes meanwhile, in which case the connection must be closed after
// this response.
func (w *clientWatch) stop() (pipelined bool) {
	w.stopping.Store(true)
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
	return w.pipelined.Load()
}
