package proxy

import (
	"net"
	"sync"
	"time"
)

// clientWatch notices a client that hangs up while its request is in
// flight, so the upstream exchange can be closed and the engine stops
// generating. It consumes nothing of the connection: it peeks at the
// socket, so a pipelined request behind this one stays for fasthttp to read.
//
// A FIN from the client is ambiguous: it closed the connection, or only
// half-closed it after sending (shutdown(SHUT_WR)) and still waits for the
// answer. To tell them apart the watch writes something the client must
// ignore (see prober); a client that closed answers the first such write
// with a reset, so a later one fails. Where nothing can be written (an
// HTTP/1.0 client), the router just goes on.
type clientWatch struct {
	conn  net.Conn
	probe prober // nil: a half-closed client cannot be probed
	gone  func()
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// prober writes to a half-closed client something it ignores, or nothing
// when nothing can be written just now.
type prober interface {
	probe(conn net.Conn) error
}

// probeIntervals are the waits between probes of a half-closed client: the
// first detects a closed client within about one round trip and 100 ms, the
// later ones keep a long wait cheap.
var probeIntervals = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second}

// probeWriteTimeout bounds one probe: stop must never wait long on a client
// that does not read.
const probeWriteTimeout = time.Second

// watchClient starts watching conn; gone is called, at most once and from
// the watch's goroutine, if the client leaves.
func watchClient(conn net.Conn, probe prober, gone func()) *clientWatch {
	w := &clientWatch{conn: conn, probe: probe, gone: gone, quit: make(chan struct{}), done: make(chan struct{})}
	// The request was read whole: its read deadline, if the server set one,
	// means nothing now, and would end the watch early.
	_ = conn.SetReadDeadline(time.Time{})
	go w.run()
	return w
}

func (w *clientWatch) run() {
	defer close(w.done)
	switch peek(w.conn, true) {
	case peekError:
		if !w.stopping() {
			w.gone()
		}
	case peekEOF:
		if w.probe != nil {
			w.probeHalfClosed()
		}
	}
	// peekData: a pipelined request, for fasthttp; peekUnknown: nothing to watch.
}

// probeHalfClosed probes until a probe fails (the client is gone) or the
// watch stops.
func (w *clientWatch) probeHalfClosed() {
	for i := 0; ; i++ {
		if err := w.probe.probe(w.conn); err != nil {
			if !w.stopping() {
				w.gone()
			}
			return
		}
		t := time.NewTimer(probeIntervals[min(i, len(probeIntervals)-1)])
		select {
		case <-w.quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (w *clientWatch) stopping() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// stop ends the watch and waits for it, so that the watch writes nothing
// more to the connection once it returns. Later calls do nothing.
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.quit)
		_ = w.conn.SetReadDeadline(time.Unix(1, 0)) // wakes a waiting peek
		<-w.done
		_ = w.conn.SetReadDeadline(time.Time{})
	})
}

// interimContinue probes a half-closed HTTP/1.1 client before its response:
// an interim "100 Continue", which every HTTP/1.1 client must accept and skip
// before the final response.
type interimContinue struct{}

var continueResponse = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// The server sets its own write deadline before it writes the response.
func (interimContinue) probe(conn net.Conn) error {
	_ = conn.SetWriteDeadline(time.Now().Add(probeWriteTimeout))
	_, err := conn.Write(continueResponse)
	return err
}

// requestProber is how a client is probed before its response: with
// interim responses when it speaks HTTP/1.1, not at all otherwise.
func requestProber(http11 bool) prober {
	if http11 {
		return interimContinue{}
	}
	return nil
}
