package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The replicas' own HTTP runs on the cluster port (Port, link kind
// KindRPC), never on the API port: with cluster TLS, only a peer holding a
// certificate of the cluster CA reaches it, and nothing it carries (a
// registry write, a gossip key) travels in the clear. It needs no admin
// token: the replica that took the operator's request checked that.
const (
	// maxRPCResponse bounds the answer a replica reads from a peer.
	maxRPCResponse = 64 << 10
	// rpcConnectTimeout bounds connecting to a peer's cluster port, TLS
	// handshake included. A peer on the same network answers in
	// milliseconds; one that died, or that a partition hides, never does,
	// and a write forwarded to it should fail over to 503 at once rather
	// than wait for the whole write's deadline.
	rpcConnectTimeout = time.Second
	// ReachTimeout bounds reaching a peer for a write (CallHeard):
	// connecting, the TLS handshake, sending the request's head and hearing
	// the peer's 100 Continue, all together. A frozen peer (SIGSTOP, a
	// swapped-out host) still accepts connections in its kernel and keeps
	// the ones pooled before, so bounding the connect alone is not enough.
	ReachTimeout = time.Second
)

// ErrPeerSilent: the peer did not ask for a write's body within
// ReachTimeout, so the body was never sent.
var ErrPeerSilent = errors.New("the peer did not answer within the reach bound")

// ServerLimits bound the cluster port's HTTP server.
type ServerLimits struct {
	// Timeout bounds reading a request and writing an answer: longer than
	// the slowest handler (a forwarded write waits for its commit).
	Timeout time.Duration
	// MaxBody bounds a request body, in bytes.
	MaxBody int
}

// Serve answers the peers' HTTP on ln (Port.RPCListener) with h until ctx
// ends.
func Serve(ctx context.Context, ln net.Listener, h fasthttp.RequestHandler, limits ServerLimits) {
	srv := &fasthttp.Server{
		Handler:               h,
		ReadTimeout:           limits.Timeout,
		WriteTimeout:          limits.Timeout,
		IdleTimeout:           30 * time.Second,
		MaxRequestBodySize:    limits.MaxBody,
		NoDefaultServerHeader: true,
		// The worker pool's cleaner notices Shutdown only between rounds.
		MaxIdleWorkerDuration: time.Second,
	}
	ServeUntil(ctx, srv, ln)
}

// ServeUntil runs srv on ln until ctx ends, then shuts it down and waits
// for Serve to return. It closes ln itself as well: fasthttp's Shutdown
// does nothing to a Serve that has not registered its listener yet, which
// would then serve on, and its caller wait, forever.
func ServeUntil(ctx context.Context, srv *fasthttp.Server, ln net.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	<-ctx.Done()
	_ = srv.Shutdown()
	_ = ln.Close()
	<-done
}

// Client calls the peers' HTTP over their cluster ports. Safe for
// concurrent use.
type Client struct {
	http *http.Client
}

// NewClient returns a client that dials peers through port; timeout bounds
// waiting for an answer's head, as ServerLimits.Timeout bounds the peer.
func NewClient(port *Port, timeout time.Duration) *Client {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, rpcConnectTimeout)
			defer cancel()
			conn, err := port.Dial(ctx, addr, KindRPC)
			if err != nil {
				// Not wrapped: a connect that timed out is an unreachable
				// peer (503), not a write whose outcome is unknown (504).
				return nil, fmt.Errorf("connecting to %s: %v", addr, err)
			}
			return conn, nil
		},
		// The placer's questions come in bursts (a replica asks the leader
		// for every cold request of a burst at once): connections kept
		// idle spare each of them a dial and, with cluster TLS, a handshake.
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: timeout,
		// Longer than any reach bound: CallHeard decides when to give up
		// on a peer's 100 Continue, never the transport (which would then
		// send the body anyway).
		ExpectContinueTimeout: timeout,
	}
	return &Client{http: &http.Client{Transport: transport}}
}

// Call sends method path with body (JSON, or none) to the replica whose
// cluster port is addr and returns the status and body of its answer.
func (c *Client) Call(ctx context.Context, method, addr, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// CallUpTo is Call for an answer that may be larger than most (a peer's
// snapshot of the engines' sets): it reads up to limit bytes of it, and an
// answer over limit is an error rather than cut short.
func (c *Client) CallUpTo(ctx context.Context, method, addr, path string, body []byte, limit int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	status, data, err := c.doUpTo(req, limit+1)
	if err == nil && int64(len(data)) > limit {
		return 0, nil, fmt.Errorf("an answer over %d bytes", limit)
	}
	return status, data, err
}

// do sends req and reads the status and body of the answer.
func (c *Client) do(req *http.Request) (int, []byte, error) { return c.doUpTo(req, maxRPCResponse) }

func (c *Client) doUpTo(req *http.Request, limit int64) (int, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

// CallHeard is call for a write that must reach a live peer: the request
// goes out with Expect: 100-continue, and its body only once the peer
// answered 100 Continue (fasthttp's server does before reading a body).
// A peer that does not within reach (dead, cut off, or frozen with its
// socket still open) never gets the body, so the write cannot apply there
// when it wakes, and the call fails at once with ErrPeerSilent. Once the
// peer asked for the body, its answer is bounded by ctx alone.
func (c *Client) CallHeard(ctx context.Context, method, addr, path string, body []byte, reach time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	gate := &bodyGate{}
	timer := time.AfterFunc(reach, func() {
		if gate.abandon() {
			cancel(ErrPeerSilent)
		}
	})
	defer timer.Stop()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got100Continue: gate.open})
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Body, req.ContentLength = gate.body(body), int64(len(body))
	// A pooled connection that failed before a byte was written may be
	// retried on a fresh one, behind the same gate.
	req.GetBody = func() (io.ReadCloser, error) { return gate.body(body), nil }
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	status, data, err := c.do(req)
	if errors.Is(context.Cause(ctx), ErrPeerSilent) {
		return 0, nil, fmt.Errorf("%w (%v)", ErrPeerSilent, reach)
	}
	return status, data, err
}

// bodyGate holds a request's body until the peer asks for it, or for ever
// once the caller gave up on the peer: whichever comes first wins, so a
// body is either sent to a peer that asked in time or not at all.
type bodyGate struct{ state atomic.Int32 }

const (
	gateWaiting int32 = iota
	gateOpen
	gateAbandoned
)

// open: the peer answered 100 Continue in time.
func (g *bodyGate) open() { g.state.CompareAndSwap(gateWaiting, gateOpen) }

// abandon gives up on the peer unless it asked already; true if it had not.
func (g *bodyGate) abandon() bool { return g.state.CompareAndSwap(gateWaiting, gateAbandoned) }

func (g *bodyGate) body(b []byte) io.ReadCloser { return &gatedBody{gate: g, r: bytes.NewReader(b)} }

type gatedBody struct {
	gate *bodyGate
	r    *bytes.Reader
}

// Read hands out the body unless the caller gave up on the peer. A peer
// that answered without asking (a refusal with a final status) is open.
func (b *gatedBody) Read(p []byte) (int, error) {
	b.gate.open()
	if b.gate.state.Load() != gateOpen {
		return 0, ErrPeerSilent
	}
	return b.r.Read(p)
}

func (b *gatedBody) Close() error { return nil }

// Close drops the idle connections to the peers.
func (c *Client) Close() { c.http.CloseIdleConnections() }
