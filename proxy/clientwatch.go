package proxy

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/peek"
)

// clientWatch notices a client that hangs up while its request is in
// flight, so the upstream exchange can be closed and the engine stops
// generating. It consumes nothing of the connection: it peeks at the
// socket, so a pipelined request behind this one stays for fasthttp to read.
//
// A watch costs nothing while its request is young: the proxy's one
// watcher goroutine looks at the watches older than watchFirstLook, with a
// peek that does not wait, and again at growing intervals up to
// watchMaxInterval. Most answers are done before the first look, and a
// client that hangs up is noticed within about that interval.
//
// A FIN from the client is ambiguous: it closed the connection, or only
// half-closed it after sending (shutdown(SHUT_WR)) and still waits for the
// answer. To tell them apart the watch writes something the client must
// ignore (see prober); a client that closed answers the first such write
// with a reset, so a later one fails. Where nothing can be written (an
// HTTP/1.0 client), the router just goes on. Probing runs on a goroutine of
// the watch's own, started only for a half-closed client.
type clientWatch struct {
	w     *watcher
	conn  net.Conn
	probe prober // nil: a half-closed client cannot be probed
	x     leaver // told when the client is gone
	// queued: the request waits for admission, its body maybe unread, so
	// the server's read deadline still bounds that body and must stay.
	queued bool

	// the watcher's list of watches, guarded by w.mu
	prev, next *clientWatch
	linked     bool

	// only the watcher goroutine touches these
	due      time.Time     // the next look
	interval time.Duration // the wait after it
	raw      syscall.RawConn

	mu      sync.Mutex // held by the watcher during a look; stop takes it
	stopped bool
	quit    chan struct{} // a probing goroutine's stop signal, nil if none
	done    chan struct{} // closed when that goroutine returns
}

// leaver is told that the client of a watched request went away: the
// exchange serving it, or the admission ticket it waits with.
type leaver interface {
	clientGone()
}

// prober writes to a half-closed client something it ignores, or nothing
// when nothing can be written just now.
type prober interface {
	probe(conn net.Conn) error
}

const (
	// watchFirstLook is the age of a request at the first look at its client.
	watchFirstLook = 20 * time.Millisecond
	// watchMaxInterval is the longest wait between two looks.
	watchMaxInterval = 100 * time.Millisecond
	// watchTick is how often the watcher wakes while requests are in flight.
	watchTick = 5 * time.Millisecond
)

// probeIntervals are the waits between probes of a half-closed client: the
// first detects a closed client within about one round trip and 100 ms, the
// later ones keep a long wait cheap.
var probeIntervals = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second}

// probeWriteTimeout bounds one probe: stop must never wait long on a client
// that does not read.
const probeWriteTimeout = time.Second

// watcher owns the watches of one proxy and the goroutine that looks at
// them. Its methods are safe for concurrent use.
type watcher struct {
	mu       sync.Mutex
	head     *clientWatch // oldest first
	tail     *clientWatch
	sleeping bool // run waits for wake: the list was empty
	wake     chan struct{}
	scratch  []*clientWatch // run's list of watches due, reused
	look     func(fd uintptr) bool
	seen     peek.State // what look saw
}

func newWatcher() *watcher {
	w := &watcher{wake: make(chan struct{}, 1)}
	w.look = func(fd uintptr) bool { w.seen, _ = peek.FD(fd); return true } // made once: looks allocate nothing
	return w
}

// watch starts watching conn, the client of x, from now on; x.clientGone
// is called, at most once and from the watcher's goroutine or the watch's
// own, if the client leaves.
func (w *watcher) watch(conn net.Conn, probe prober, x leaver, now time.Time) *clientWatch {
	c := &clientWatch{}
	w.start(c, conn, probe, x, now)
	return c
}

// start is watch on a clientWatch the caller provides (embedded in its
// exchange, to save an allocation).
func (w *watcher) start(c *clientWatch, conn net.Conn, probe prober, x leaver, now time.Time) {
	*c = clientWatch{w: w, conn: conn, probe: probe, x: x, interval: watchFirstLook}
	w.link(c, now)
}

// startQueued is start for a request that waits for admission before its
// body is read. The watch keeps the connection's read deadline (it bounds
// the body still to come), and stops, telling no one, when that deadline
// passes or when bytes of the body wait in the socket: a client that left
// is then found by the queue's timeout, as before.
func (w *watcher) startQueued(c *clientWatch, conn net.Conn, probe prober, x leaver, now time.Time) {
	*c = clientWatch{w: w, conn: conn, probe: probe, x: x, interval: watchFirstLook, queued: true}
	w.link(c, now)
}

// WatchQueued watches the client of rc, a request that waits for
// admission (startQueued): gone is called when it leaves; stop ends the
// watch.
func (w *watcher) WatchQueued(rc *fasthttp.RequestCtx, gone func()) (stop func()) {
	q := &queuedClient{gone: gone}
	w.startQueued(&q.watch, rc.Conn(), requestProber(rc.Request.Header.IsHTTP11()), q, time.Now())
	return q.watch.stop
}

// queuedClient is the watch on the client of a queued request: a client
// that leaves takes its ticket out of the queue (gone).
type queuedClient struct {
	gone  func()
	watch clientWatch
}

func (q *queuedClient) clientGone() { q.gone() }

// link adds c to the watches, its first look due watchFirstLook from now.
func (w *watcher) link(c *clientWatch, now time.Time) {
	c.due = now.Add(watchFirstLook)
	w.mu.Lock()
	c.prev, c.linked = w.tail, true
	if w.tail != nil {
		w.tail.next = c
	} else {
		w.head = c
	}
	w.tail = c
	wake := w.sleeping
	w.sleeping = false
	w.mu.Unlock()
	if wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) unlink(c *clientWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !c.linked {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		w.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		w.tail = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
}

// run looks at the watches until ctx ends, every watchTick while there are
// any.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTimer(watchTick)
	defer t.Stop()
	for {
		if w.idle() {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
		}
		t.Reset(watchTick)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.sweep(time.Now())
	}
}

// idle reports, and records for the next watch, that there is nothing to
// look at.
func (w *watcher) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sleeping = w.head == nil
	return w.sleeping
}

// sweep looks at every watch that is due. The list is walked under the
// lock, the looks are made outside it, so a request never waits on a look
// at another one.
func (w *watcher) sweep(now time.Time) {
	w.mu.Lock()
	due := w.scratch[:0]
	for c := w.head; c != nil; c = c.next {
		if !c.due.After(now) {
			due = append(due, c)
		}
	}
	w.mu.Unlock()
	for i, c := range due {
		if !c.look(w) {
			w.unlink(c)
		}
		c.interval = min(2*c.interval, watchMaxInterval)
		c.due = now.Add(c.interval)
		due[i] = nil
	}
	w.scratch = due[:0]
}

// look peeks at the client's socket once, without waiting, and reports
// whether the watch should go on looking. Only w's goroutine calls it.
func (c *clientWatch) look(w *watcher) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	if c.raw == nil {
		// The request was read whole: its read deadline, if the server set
		// one, means nothing now, and would fail the look.
		if !c.queued {
			_ = c.conn.SetReadDeadline(time.Time{})
		}
		if c.raw = peek.RawConn(c.conn); c.raw == nil {
			return false // nothing to look at
		}
	}
	w.seen = peek.Error
	if err := c.raw.Read(w.look); err != nil && c.queued {
		return false // the body's read deadline passed: the body read will say so
	}
	switch w.seen {
	case peek.Error:
		c.x.clientGone()
		return false
	case peek.EOF:
		if c.probe != nil {
			c.quit, c.done = make(chan struct{}), make(chan struct{})
			go c.probeHalfClosed()
		}
		return false
	case peek.Empty:
		return true
	}
	return false // peekData: a pipelined request, for fasthttp; peekUnknown: nothing to watch
}

// probeHalfClosed probes until a probe fails (the client is gone) or the
// watch stops.
func (c *clientWatch) probeHalfClosed() {
	defer close(c.done)
	for i := 0; ; i++ {
		if err := c.probe.probe(c.conn); err != nil {
			select {
			case <-c.quit:
			default:
				c.x.clientGone()
			}
			return
		}
		t := time.NewTimer(probeIntervals[min(i, len(probeIntervals)-1)])
		select {
		case <-c.quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stop ends the watch and waits for it, so that the watch writes nothing
// more to the connection once it returns. Later calls do nothing.
func (c *clientWatch) stop() {
	if c == nil || c.w == nil {
		return
	}
	c.mu.Lock()
	already := c.stopped
	c.stopped = true
	quit, done := c.quit, c.done
	c.mu.Unlock()
	if already {
		return
	}
	c.w.unlink(c)
	if quit != nil {
		close(quit)
		<-done
	}
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
