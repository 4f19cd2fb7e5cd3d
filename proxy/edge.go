package proxy

import (
	"net"
	"sync"
	"time"
)

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

// edgeListener hands out the client connections of the proxy's server, and
// owns the goroutines of the ones that linger.
type edgeListener struct {
	net.Listener
	mu        sync.Mutex
	lingering map[*edgeConn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

func newEdgeListener(ln net.Listener) *edgeListener {
	return &edgeListener{Listener: ln, lingering: map[*edgeConn]struct{}{}}
}

// Accept returns the next client connection.
func (l *edgeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &edgeConn{Conn: c, l: l}, nil
}

// stopLingering cuts short every lingering connection and waits for them.
func (l *edgeListener) stopLingering() {
	l.mu.Lock()
	l.closed = true
	for c := range l.lingering {
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// edgeConn is one client connection.
type edgeConn struct {
	net.Conn
	l      *edgeListener
	mu     sync.Mutex
	linger bool
}

// NetConn returns the connection underneath (for peeks at its socket).
func (c *edgeConn) NetConn() net.Conn { return c.Conn }

// lingerOnClose makes Close drain the connection before closing it.
func (c *edgeConn) lingerOnClose() {
	c.mu.Lock()
	c.linger = true
	c.mu.Unlock()
}

// Close closes the connection, or, when asked to linger, half-closes it and
// leaves the rest to a goroutine that drains it.
func (c *edgeConn) Close() error {
	c.mu.Lock()
	linger := c.linger
	c.linger = false
	c.mu.Unlock()
	if !linger || !c.l.startLingering(c) {
		return c.Conn.Close()
	}
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite() // the answer is out; a FIN follows it
	}
	go c.drain()
	return nil
}

func (l *edgeListener) startLingering(c *edgeConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.lingering) >= maxLingering {
		return false
	}
	l.lingering[c] = struct{}{}
	l.wg.Add(1)
	return true
}

// drain reads and drops what the client still sends, until it closes, goes
// quiet, or lingerTime is up, then closes the connection.
func (c *edgeConn) drain() {
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
