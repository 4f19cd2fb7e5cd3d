package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/proxy/peek"
)

// upstream is the connection pool of one worker. It speaks HTTP/1.1 with
// fasthttp's request and response codecs over connections it owns, so that
// an attempt can be aborted at any moment, waiting for headers included, by
// closing its connection: that is how a client's disconnect reaches the
// engine, which then stops generating.
//
// A connection goes back to the pool only when its last response was read
// exactly to its end, both sides keep it alive, and nothing more waits on
// it; an idle connection is looked at again before reuse. A worker that
// writes past its own framing can therefore never hand one client's bytes
// to the next.
type upstream struct {
	addr        string
	tls         bool
	dialTimeout time.Duration
	idleTimeout time.Duration
	maxIdle     int
	dialer      *workerurl.Dialer // every connection to a worker passes its host policy

	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// upConn is one connection to a worker with its buffers.
type upConn struct {
	net.Conn
	raw      syscall.RawConn // the socket, for looks at it; nil if there is none
	look     func(fd uintptr) bool
	seen     peek.State // what look saw
	br       *bufio.Reader
	head     []byte      // the request head being written, reused
	iov      [2][]byte   // head and body, written with one writev
	bufs     net.Buffers // the iovecs of one write
	deadline time.Time   // the connection's deadline, left set while it is idle
	lastUsed time.Time
	reused   bool
}

// defaultWorkerIdleTimeout is Config.WorkerIdleTimeout's default.
const defaultWorkerIdleTimeout = 4 * time.Second

func newUpstream(addr string, useTLS bool, dialTimeout time.Duration, maxIdle int, dialer *workerurl.Dialer) *upstream {
	return &upstream{addr: addr, tls: useTLS, dialTimeout: dialTimeout, idleTimeout: defaultWorkerIdleTimeout, maxIdle: maxIdle, dialer: dialer}
}

// acquire returns a quiet idle connection, or dials a new one; now is
// about the time.
func (u *upstream) acquire(ctx context.Context, now, deadline time.Time) (*upConn, error) {
	if c := u.takeIdle(now); c != nil {
		return c, nil
	}
	return u.dial(ctx, deadline)
}

// takeIdle pops the most recently used idle connection that is still
// usable, closing the stale ones it meets. The look at each is made outside
// the lock.
func (u *upstream) takeIdle(now time.Time) *upConn {
	for {
		c := u.pop()
		if c == nil {
			return nil
		}
		if now.Sub(c.lastUsed) < u.idleTimeout && c.quiet(now) {
			c.reused = true
			return c
		}
		c.Close()
	}
}

func (u *upstream) pop() *upConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.idle) == 0 {
		return nil
	}
	c := u.idle[len(u.idle)-1]
	u.idle = u.idle[:len(u.idle)-1]
	return c
}

// quiet reports whether nothing waits to be read on an idle connection: no
// stray bytes the worker sent unasked and no FIN.
func (c *upConn) quiet(now time.Time) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		return true // nothing to look at: the worker's framing has to do
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		// The deadline of its last exchange passed while it was idle: a look
		// would fail on it.
		if c.SetDeadline(time.Time{}) != nil {
			return false
		}
		c.deadline = time.Time{}
	}
	if c.raw.Read(c.look) != nil {
		return false
	}
	return c.seen == peek.Empty || c.seen == peek.Unknown
}

func (u *upstream) dial(ctx context.Context, deadline time.Time) (*upConn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if u.dialTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, u.dialTimeout)
		defer cancel()
	}
	conn, err := u.dialer.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, err
	}
	if u.tls {
		host, _, _ := net.SplitHostPort(u.addr)
		tc := tls.Client(conn, &tls.Config{ServerName: host})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	c := &upConn{Conn: conn, raw: peek.RawConn(conn), br: bufio.NewReaderSize(conn, 16<<10)}
	c.look = func(fd uintptr) bool { c.seen, _ = peek.FD(fd); return true } // made once: a look allocates nothing
	return c, nil
}

// release returns c to the pool when reusable (its last response was read
// exactly to its end and the worker keeps the connection open) and nothing
// more is buffered on it; otherwise it closes c. now is about the time. The
// deadline of the exchange stays on the connection: the next one sets its
// own, and an idle connection is not read.
func (u *upstream) release(c *upConn, reusable bool, now time.Time) {
	if !reusable || c.br.Buffered() > 0 {
		c.Close()
		return
	}
	c.lastUsed = now
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || len(u.idle) >= u.maxIdle {
		c.Close()
		return
	}
	u.idle = append(u.idle, c)
}

// close closes the idle connections and refuses to pool more: the worker
// left the registry. Exchanges in flight finish on their own connections.
func (u *upstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, c := range u.idle {
		c.Close()
	}
	u.idle = nil
}

// exchange sends req with body and reads the response headers into resp;
// the body is left on the connection, for readWhole or startStream. The
// caller must hand the returned connection back with release once the body
// is done.
// The connection is attached to lc, which may cut it whatever the exchange
// is waiting on; the caller detaches it before release. When ctx ends
// (it does before lc cuts for the exchange's sake), the exchange fails with
// ctx's cause.
func (u *upstream) exchange(ctx context.Context, lc liveConn, req *fasthttp.Request, body []byte, resp *fasthttp.Response, now, deadline time.Time) (*upConn, error) {
	for {
		c, err := u.acquire(ctx, now, deadline)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, &dialError{err}
		}
		if !lc.attach(c) {
			c.Close()
			return nil, causeOr(ctx, net.ErrClosed)
		}
		sent, err := roundTrip(c, req, body, resp, deadline)
		if err == nil {
			return c, nil
		}
		lc.detach(c)
		c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if c.reused && !sent && staleConn(err) {
			// The worker had closed the idle connection and not a byte of
			// the request left: it cannot have been processed. Once any
			// byte left, the worker may be acting on it, and only the
			// retry policy (counted, and aware of what may be repeated)
			// decides whether it is sent again.
			continue
		}
		return nil, err
	}
}

// roundTrip writes the request and reads the head of its answer; sent
// reports whether any byte of the request was written.
func roundTrip(c *upConn, req *fasthttp.Request, body []byte, resp *fasthttp.Response, deadline time.Time) (sent bool, err error) {
	if !deadline.Equal(c.deadline) {
		if err := c.SetDeadline(deadline); err != nil {
			return false, err
		}
		c.deadline = deadline
	}
	n, err := c.writeRequest(req, body)
	if err != nil {
		return n > 0, err
	}
	// The answer cannot be there yet: a read now would find nothing (EAGAIN)
	// and wait in the poller. Other goroutines run first, so that on a busy
	// router the answer has usually arrived when it is read.
	runtime.Gosched()
	return true, readHead(c.br, resp)
}

// writeRequest writes the head of req and body with one writev, without
// copying the body, and returns how many bytes were written.
func (c *upConn) writeRequest(req *fasthttp.Request, body []byte) (int64, error) {
	if len(body) > 0 || !req.Header.IsGet() {
		req.Header.SetContentLength(len(body))
	}
	c.head = req.Header.AppendBytes(c.head[:0])
	c.iov = [2][]byte{c.head, body}
	c.bufs = c.iov[:]
	n, err := c.bufs.WriteTo(c.Conn)
	c.iov[1] = nil // the body is the client's
	return n, err
}

// maxInterim is how many interim (1xx) responses are skipped before the
// final one.
const maxInterim = 8

// readHead reads the head of the final response, skipping interim ones.
func readHead(br *bufio.Reader, resp *fasthttp.Response) error {
	for range maxInterim {
		if err := resp.Header.Read(br); err != nil {
			return err
		}
		if code := resp.StatusCode(); code >= 200 || code < 100 || code == fasthttp.StatusSwitchingProtocols {
			return nil
		}
	}
	return errors.New("too many interim responses")
}

// readBody reads the body of resp, whose head was read from br, whole:
// up to limit bytes, and the trailer that ends a chunked body.
func readBody(br *bufio.Reader, resp *fasthttp.Response, limit int) error {
	resp.StreamBody = false
	err := resp.ReadBody(br, limit)
	if err == nil && resp.Header.ContentLength() == -1 {
		err = resp.Header.ReadTrailer(br)
	}
	return err
}

// hasBody reports whether a response with this status carries a body.
func hasBody(status int) bool {
	return status >= 200 && status != fasthttp.StatusNoContent && status != fasthttp.StatusNotModified
}

// causeOr is why ctx ended, or err when it did not.
func causeOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return err
}

// dialError marks a failure to connect: nothing reached the worker.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// staleConn reports whether err is what a pooled connection that the worker
// had already closed gives on its next use.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
