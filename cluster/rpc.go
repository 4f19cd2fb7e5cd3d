package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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
)

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
