package cluster

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

// The replicas' own HTTP runs on the cluster port (clusterPort, link kind
// linkRPC), never on the API port: with cluster TLS, only a peer holding a
// certificate of the cluster CA reaches it, and nothing it carries (a
// registry write, a gossip key) travels in the clear. It needs no admin
// token: the replica that took the operator's request checked that.
const (
	// rpcTimeout bounds reading a request and writing an answer; a
	// forwarded write waits up to DefaultAdminApplyTimeout for its commit
	// in between.
	rpcTimeout = DefaultAdminApplyTimeout + 5*time.Second
	// maxRPCResponse bounds the answer a replica reads from a peer.
	maxRPCResponse = 64 << 10
	// rpcConnectTimeout bounds connecting to a peer's cluster port, TLS
	// handshake included. A peer on the same network answers in
	// milliseconds; one that died, or that a partition hides, never does,
	// and a write forwarded to it should fail over to 503 at once rather
	// than wait for the whole write's deadline.
	rpcConnectTimeout = time.Second
	// rpcReachTimeout bounds reaching a peer for a write (callHeard):
	// connecting, the TLS handshake, sending the request's head and hearing
	// the peer's 100 Continue, all together. A frozen peer (SIGSTOP, a
	// swapped-out host) still accepts connections in its kernel and keeps
	// the ones pooled before, so bounding the connect alone is not enough.
	rpcReachTimeout = time.Second
)

// errPeerSilent: the peer did not ask for a write's body within
// rpcReachTimeout, so the body was never sent.
var errPeerSilent = errors.New("the peer did not answer within the reach bound")

// serveRPC answers the peers' HTTP on the cluster port until ctx ends.
// routes maps a path to its handler; other paths are 404.
func serveRPC(ctx context.Context, ln net.Listener, routes map[string]fasthttp.RequestHandler) {
	srv := &fasthttp.Server{
		Handler: func(c *fasthttp.RequestCtx) {
			h, ok := routes[string(c.Path())]
			if !ok {
				writeError(c, &statusError{http.StatusNotFound, "not_found_error", "no cluster endpoint " + string(c.Path())})
				return
			}
			h(c)
		},
		ReadTimeout:           rpcTimeout,
		WriteTimeout:          rpcTimeout,
		IdleTimeout:           30 * time.Second,
		MaxRequestBodySize:    maxAdminBody,
		NoDefaultServerHeader: true,
		// The worker pool's cleaner notices Shutdown only between rounds.
		MaxIdleWorkerDuration: time.Second,
	}
	serveUntil(ctx, srv, ln)
}

// serveUntil runs srv on ln until ctx ends, then shuts it down and waits
// for Serve to return. It closes ln itself as well: fasthttp's Shutdown
// does nothing to a Serve that has not registered its listener yet, which
// would then serve on, and its caller wait, forever.
func serveUntil(ctx context.Context, srv *fasthttp.Server, ln net.Listener) {
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

// rpcClient calls the peers' HTTP over their cluster ports. Safe for
// concurrent use.
type rpcClient struct {
	http *http.Client
}

func newRPCClient(port *clusterPort) *rpcClient {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, rpcConnectTimeout)
			defer cancel()
			conn, err := port.dial(ctx, addr, linkRPC)
			if err != nil {
				// Not wrapped: a connect that timed out is an unreachable
				// peer (503), not a write whose outcome is unknown (504).
				return nil, fmt.Errorf("connecting to %s: %v", addr, err)
			}
			return conn, nil
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: rpcTimeout,
		// Longer than any reach bound: callHeard decides when to give up
		// on a peer's 100 Continue, never the transport (which would then
		// send the body anyway).
		ExpectContinueTimeout: rpcTimeout,
	}
	return &rpcClient{http: &http.Client{Transport: transport}}
}

// call sends method path with body (JSON, or none) to the replica whose
// cluster port is addr and returns the status and body of its answer.
func (c *rpcClient) call(ctx context.Context, method, addr, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// do sends req and reads the status and body of the answer.
func (c *rpcClient) do(req *http.Request) (int, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRPCResponse))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

// callHeard is call for a write that must reach a live peer: the request
// goes out with Expect: 100-continue, and its body only once the peer
// answered 100 Continue (fasthttp's server does before reading a body).
// A peer that does not within reach (dead, cut off, or frozen with its
// socket still open) never gets the body, so the write cannot apply there
// when it wakes, and the call fails at once with errPeerSilent. Once the
// peer asked for the body, its answer is bounded by ctx alone.
func (c *rpcClient) callHeard(ctx context.Context, method, addr, path string, body []byte, reach time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	gate := &bodyGate{}
	timer := time.AfterFunc(reach, func() {
		if gate.abandon() {
			cancel(errPeerSilent)
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
	if errors.Is(context.Cause(ctx), errPeerSilent) {
		return 0, nil, fmt.Errorf("%w (%v)", errPeerSilent, reach)
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
		return 0, errPeerSilent
	}
	return b.r.Read(p)
}

func (b *gatedBody) Close() error { return nil }

// close drops the idle connections to the peers.
func (c *rpcClient) close() { c.http.CloseIdleConnections() }

// rpcRoutes are the endpoints of the cluster port's HTTP, all POST.
func (r *Replica) rpcRoutes() map[string]fasthttp.RequestHandler {
	return map[string]fasthttp.RequestHandler{
		applyPath:   postOnly(func(c *fasthttp.RequestCtx) { r.admin.applyForwarded(c, 0) }),
		keyringPath: postOnly(r.serveLocalKeyring),
	}
}

func postOnly(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !c.IsPost() {
			c.Response.Header.Set("Allow", http.MethodPost)
			writeError(c, &statusError{http.StatusMethodNotAllowed, "invalid_request_error", "only POST here"})
			return
		}
		h(c)
	}
}
