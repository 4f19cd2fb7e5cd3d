package edge

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener hands out the client connections of the proxy's server. It
// keeps the accept loop alive when the process runs out of file descriptors
// or memory (fasthttp would stop accepting for good), counts connections
// against --max-connections, and owns the goroutines of the connections
// that linger.
type Listener struct {
	net.Listener
	log      *slog.Logger
	maxConns int64
	// WatchHeads: the connections are plaintext HTTP, whose first request
	// head each watches for bare LFs (heads.go).
	WatchHeads bool
	active     atomic.Int64
	// failedAt is when accepting last failed for lack of resources (unix
	// nanoseconds), 0 once an accept succeeded since.
	failedAt atomic.Int64
	quit     chan struct{}
	quitOnce sync.Once

	mu        sync.Mutex
	lingering map[*Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

func NewListener(ln net.Listener, maxConns int, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, log: log, maxConns: int64(maxConns), quit: make(chan struct{}),
		lingering: map[*Conn]struct{}{}}
}

// Accept returns the next client connection. A failure for lack of
// resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) or an aborted handshake is
// logged at ERROR and retried with backoff, so the listener recovers once
// descriptors are free again; any other error is returned, and ends Serve.
func (l *Listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	var lastLog time.Time
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if l.failedAt.Swap(0) != 0 {
				l.log.Info("accepting client connections again")
			}
			over := l.maxConns > 0 && l.active.Add(1) > l.maxConns
			return &Conn{Conn: c, l: l, overLimit: over, head: headEnds{done: !l.WatchHeads}}, nil
		}
		if errors.Is(err, net.ErrClosed) || !recoverableAcceptError(err) {
			return nil, err
		}
		l.failedAt.Store(time.Now().UnixNano())
		if time.Since(lastLog) >= time.Second {
			l.log.Error("cannot accept client connections; retrying", "err", err)
			lastLog = time.Now()
		}
		backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.quit:
			t.Stop()
			return nil, net.ErrClosed
		}
	}
}

// recoverableAcceptError reports whether an accept failed for a reason that
// passes: resources that free up, or a client that gave up mid-handshake.
func recoverableAcceptError(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close stops accepting.
func (l *Listener) Close() error {
	l.quitOnce.Do(func() { close(l.quit) })
	return l.Listener.Close()
}

// maxAcceptBackoff is the longest wait between two accepts that failed.
const maxAcceptBackoff = time.Second

// Accepting reports whether the listener can take new connections: no
// accept failed for lack of resources within two of its longest backoffs.
// A listener that is still failing fails again within one; one whose
// retry found the descriptors free but no client waiting (the ones queued
// during the failure gave up) waits for the next client without a success
// to report, and must not say it is failing meanwhile.
func (l *Listener) Accepting() bool {
	at := l.failedAt.Load()
	return at == 0 || time.Since(time.Unix(0, at)) > 2*maxAcceptBackoff
}

// Lingering close, as nginx does it: a connection the router closes while
// the client may still be sending (a body refused with 413, headers refused
// with 431) is half-closed after the answer and drained for a while before
// it is closed. Closing it at once would make the kernel reset it, and the
// reset discards the answer on its way: a client that sends its whole body
// before reading (Python's http.client, requests, httpx) would see a broken
// pipe instead of the 413.
const (
	lingerTime    = 30 * time.Second // the most a connection lingers
	lingerIdle    = 5 * time.Second  // the most it waits for the client's next bytes
	maxLingering  = 1024             // connections lingering at once; more are closed at once
	lingerBufSize = 32 << 10
)

// StopLingering cuts short every lingering connection and waits for them.
func (l *Listener) StopLingering() {
	l.mu.Lock()
	l.closed = true
	for c := range l.lingering {
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *Listener) startLingering(c *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.lingering) >= maxLingering {
		return false
	}
	l.lingering[c] = struct{}{}
	l.wg.Add(1)
	return true
}

// Conn is one client connection.
type Conn struct {
	net.Conn
	l         *Listener
	overLimit bool // accepted past --max-connections: answered 503 and closed
	head      headEnds
	mu        sync.Mutex
	linger    bool
	closed    bool
}

// OverLimit reports whether the connection was accepted past the limit of
// connections: the server answers its requests 503, and closes it.
func (c *Conn) OverLimit() bool { return c.overLimit }

// Read reads from the client, watching its first request head.
func (c *Conn) Read(b []byte) (int, error) { return c.head.read(c.Conn.Read, b) }

// NetConn returns the connection underneath (for peeks at its socket).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// LingerOnClose makes Close drain the connection before closing it.
func (c *Conn) LingerOnClose() {
	c.mu.Lock()
	c.linger = true
	c.mu.Unlock()
}

// Close closes the connection, or, when asked to linger, half-closes it and
// leaves the rest to a goroutine that drains it.
func (c *Conn) Close() error {
	c.mu.Lock()
	linger, already := c.linger, c.closed
	c.linger, c.closed = false, true
	c.mu.Unlock()
	if already {
		return nil
	}
	if c.l.maxConns > 0 {
		c.l.active.Add(-1)
	}
	if !linger || !c.l.startLingering(c) {
		return c.Conn.Close()
	}
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite() // the answer is out; a FIN follows it
	}
	go c.drain()
	return nil
}

// drain reads and drops what the client still sends, until it closes, goes
// quiet, or lingerTime is up, then closes the connection.
func (c *Conn) drain() {
	defer c.l.wg.Done()
	defer func() {
		c.l.mu.Lock()
		delete(c.l.lingering, c)
		c.l.mu.Unlock()
		c.Conn.Close()
	}()
	end := time.Now().Add(lingerTime)
	buf := make([]byte, lingerBufSize)
	for {
		// The deadline first: stopLingering sets its own after it marked the
		// listener closed, so either this sees closed or that cuts the read.
		_ = c.Conn.SetReadDeadline(minTime(end, time.Now().Add(lingerIdle)))
		c.l.mu.Lock()
		closed := c.l.closed
		c.l.mu.Unlock()
		if closed {
			return
		}
		if _, err := c.Conn.Read(buf); err != nil {
			return
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Of returns the edge connection under conn (through TLS), or nil.
func Of(conn net.Conn) *Conn {
	for conn != nil {
		if ec, ok := conn.(*Conn); ok {
			return ec
		}
		inner, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		conn = inner.NetConn()
	}
	return nil
}
