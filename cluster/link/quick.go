package link

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// maxQuickConns bounds the connections Quick holds to one peer, idle or
// in use: a burst of questions (every new session of a tier's first
// instant) waits for one of them rather than dialling a connection each.
// A peer admits only so many connections from one address in their
// handshake at once (maxPendingPerHost); past that it closes them unread,
// and a question on one fails.
const maxQuickConns = 4

// Quick puts small questions to peers on a request's path (the placer's):
// each is written and its answer read on the caller's goroutine, over
// connections dialled through the port (the same TLS and link kind as
// Client's) and kept for the next question. Client's net/http transport
// hands every call to two goroutines of its own, and on a loaded host each
// hand-off is a wake-up of another thread that waits for a core; here a
// question waits only for the peer. It starts no goroutine. Safe for
// concurrent use.
type Quick struct {
	port  *Port
	mu    sync.Mutex
	peers map[string]*quickPeer
	shut  bool
	// Waited, when set before the first Post, hears how long a question
	// waited for a connection (a free kept one, or room to dial one) when
	// none was free at once: the part of a question's time spent queued
	// on this side rather than on the way and at the peer.
	Waited func(time.Duration)
}

// quickPeer is one peer's connections: idle ones ready for a question, and
// a slot for each connection held, idle or in use.
type quickPeer struct {
	idle  chan *quickConn
	slots chan struct{}
}

type quickConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// NewQuick returns a Quick that dials peers through port.
func NewQuick(port *Port) *Quick {
	return &Quick{port: port, peers: map[string]*quickPeer{}}
}

// Post sends body (binary) to path on the replica whose cluster port is
// addr and returns the status and body of its answer, all before deadline.
// A connection that the peer closed before answering (a kept one it closed
// while idle, a new one it did not admit) fails before any answer; the
// question is then put once more on a fresh one.
func (q *Quick) Post(addr, path string, body []byte, deadline time.Time) (int, []byte, error) {
	peer, err := q.peer(addr)
	if err != nil {
		return 0, nil, err
	}
	for retried := false; ; retried = true {
		c, err := q.conn(peer, addr, deadline, retried)
		if err != nil {
			return 0, nil, err
		}
		status, data, keep, err := c.roundTrip(addr, path, body, deadline)
		if err == nil {
			q.release(peer, c, keep)
			return status, data, nil
		}
		q.release(peer, c, false)
		if retried || !closedUnanswered(err) || !time.Now().Before(deadline) {
			return 0, nil, err
		}
	}
}

// peer returns addr's connections, made on the first question to it.
func (q *Quick) peer(addr string) (*quickPeer, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shut {
		return nil, errors.New("closed")
	}
	p, ok := q.peers[addr]
	if !ok {
		p = &quickPeer{idle: make(chan *quickConn, maxQuickConns), slots: make(chan struct{}, maxQuickConns)}
		q.peers[addr] = p
	}
	return p, nil
}

// closedUnanswered: err is what a connection the peer closed without
// answering gives: a kept one it closed while idle, on its next use, or a
// new one it refused at its handshake.
func closedUnanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// conn returns an idle connection to addr, or a new one while fewer than
// maxQuickConns are held; otherwise it waits for either until deadline.
// fresh asks for a new connection (the kept one just failed).
func (q *Quick) conn(p *quickPeer, addr string, deadline time.Time, fresh bool) (*quickConn, error) {
	if !fresh {
		select {
		case c := <-p.idle:
			return c, nil
		default:
		}
	}
	start := time.Now()
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	idle := p.idle
	if fresh {
		idle = nil // a slot, for a new one
	}
	select {
	case c := <-idle:
		q.waited(start)
		return c, nil
	case p.slots <- struct{}{}:
		q.waited(start)
	case <-wait.C:
		q.waited(start)
		return nil, fmt.Errorf("no connection to %s free before the deadline: %w", addr, os.ErrDeadlineExceeded)
	}
	ctx, cancel := context.WithDeadline(context.Background(), earliest(deadline, time.Now().Add(rpcConnectTimeout)))
	defer cancel()
	nc, err := q.port.Dial(ctx, addr, KindRPC)
	if err != nil {
		<-p.slots
		return nil, fmt.Errorf("connecting to %s: %v", addr, err)
	}
	return &quickConn{Conn: nc, r: bufio.NewReaderSize(nc, 4096), w: bufio.NewWriterSize(nc, 4096)}, nil
}

func (q *Quick) waited(start time.Time) {
	if q.Waited != nil {
		q.Waited(time.Since(start))
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// release keeps c for the next question to its peer, or closes it and
// frees its slot.
func (q *Quick) release(p *quickPeer, c *quickConn, keep bool) {
	q.mu.Lock()
	keep = keep && !q.shut
	if keep {
		p.idle <- c // never blocks: a held connection has a slot, and idle room for every slot
	}
	q.mu.Unlock()
	if !keep {
		_ = c.Close()
		<-p.slots
	}
}

// Close closes the idle connections; a Quick closed keeps none after, and
// puts no more questions.
func (q *Quick) Close() {
	q.mu.Lock()
	peers := q.peers
	q.peers, q.shut = map[string]*quickPeer{}, true
	q.mu.Unlock()
	for _, p := range peers {
		p.closeIdle()
	}
}

// closeIdle closes p's idle connections and frees their slots.
func (p *quickPeer) closeIdle() {
	for {
		select {
		case c := <-p.idle:
			_ = c.Close()
			<-p.slots
		default:
			return
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
