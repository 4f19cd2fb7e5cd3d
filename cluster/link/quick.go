package link

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// maxQuickIdle bounds the connections kept idle per peer: the placer's
// questions come in bursts, one connection for each question in flight.
const maxQuickIdle = 32

// Quick puts small questions to peers on a request's path (the placer's):
// each is written and its answer read on the caller's goroutine, over
// connections dialled through the port (the same TLS and link kind as
// Client's) and kept for the next question. Client's net/http transport
// hands every call to two goroutines of its own, and on a loaded host each
// hand-off is a wake-up of another thread that waits for a core; here a
// question waits only for the peer. It starts no goroutine. Safe for
// concurrent use.
type Quick struct {
	port *Port
	mu   sync.Mutex
	idle map[string][]*quickConn
	shut bool
}

type quickConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// NewQuick returns a Quick that dials peers through port.
func NewQuick(port *Port) *Quick {
	return &Quick{port: port, idle: map[string][]*quickConn{}}
}

// Post sends body (binary) to path on the replica whose cluster port is
// addr and returns the status and body of its answer, all before deadline.
// A kept connection that the peer closed while it was idle fails before
// any answer; the question is then put once more on a fresh one.
func (q *Quick) Post(addr, path string, body []byte, deadline time.Time) (int, []byte, error) {
	for fresh := false; ; fresh = true {
		c, kept, err := q.conn(addr, deadline, fresh)
		if err != nil {
			return 0, nil, err
		}
		status, data, keep, err := c.roundTrip(addr, path, body, deadline)
		if err == nil {
			q.release(addr, c, keep)
			return status, data, nil
		}
		_ = c.Close()
		if !kept || !closedWhileIdle(err) || !time.Now().Before(deadline) {
			return 0, nil, err
		}
	}
}

// closedWhileIdle: err is what a kept connection the peer had closed gives
// on its next use.
func closedWhileIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// conn returns a kept connection to addr (kept true), or a new one when
// none is kept or fresh is asked for.
func (q *Quick) conn(addr string, deadline time.Time, fresh bool) (*quickConn, bool, error) {
	if !fresh {
		q.mu.Lock()
		if cs := q.idle[addr]; len(cs) > 0 {
			c := cs[len(cs)-1]
			q.idle[addr] = cs[:len(cs)-1]
			q.mu.Unlock()
			return c, true, nil
		}
		q.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(context.Background(), earliest(deadline, time.Now().Add(rpcConnectTimeout)))
	defer cancel()
	nc, err := q.port.Dial(ctx, addr, KindRPC)
	if err != nil {
		return nil, false, fmt.Errorf("connecting to %s: %v", addr, err)
	}
	return &quickConn{Conn: nc, r: bufio.NewReaderSize(nc, 4096), w: bufio.NewWriterSize(nc, 4096)}, false, nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// release keeps c for the next question to addr, or closes it.
func (q *Quick) release(addr string, c *quickConn, keep bool) {
	q.mu.Lock()
	if keep && !q.shut && len(q.idle[addr]) < maxQuickIdle {
		q.idle[addr] = append(q.idle[addr], c)
		c = nil
	}
	q.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// Close closes the kept connections; a Quick closed keeps none after.
func (q *Quick) Close() {
	q.mu.Lock()
	idle := q.idle
	q.idle, q.shut = map[string][]*quickConn{}, true
	q.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

// roundTrip writes one request on c and reads its answer; keep says
// whether c may carry the next one.
func (c *quickConn) roundTrip(addr, path string, body []byte, deadline time.Time) (int, []byte, bool, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return 0, nil, false, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetContentType("application/octet-stream")
	req.SetBodyRaw(body)
	if err := req.Write(c.w); err != nil {
		return 0, nil, false, err
	}
	if err := c.w.Flush(); err != nil {
		return 0, nil, false, err
	}
	if err := resp.ReadLimitBody(c.r, maxRPCResponse); err != nil {
		return 0, nil, false, fmt.Errorf("reading the answer: %w", err)
	}
	keep := !resp.ConnectionClose() && c.r.Buffered() == 0 && c.SetDeadline(time.Time{}) == nil
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), keep, nil
}
