package health

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// maxProbeBody bounds the health response body read; health endpoints answer
// with a few bytes, and a larger body fails the probe.
const maxProbeBody = 64 << 10

// probeTarget is where a worker's endpoints live, parsed once.
type probeTarget struct {
	addr     string // host:port to dial
	isTLS    bool
	uri      string // full URL of the health endpoint
	metrics  string // full URL of the engine's Prometheus metrics
	generate string // full URL of the one-token generation a recovery probe sends
}

func newProbeTarget(raw, endpoint string) (probeTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return probeTarget{}, fmt.Errorf("%w: %q: %w", ErrBadTarget, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return probeTarget{}, fmt.Errorf("%w: %q: want http(s)://host[:port]", ErrBadTarget, raw)
	}
	isTLS := u.Scheme == "https"
	base := u.Scheme + "://" + u.Host + trimSlash(u.Path)
	return probeTarget{
		addr:     fasthttp.AddMissingPort(u.Host, isTLS),
		isTLS:    isTLS,
		uri:      base + endpoint,
		metrics:  base + "/metrics",
		generate: base + "/v1/completions",
	}, nil
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// workerClient talks to workers outside the request path: active checks, engine
// scrapes and recovery probes, each one call on a fresh connection that is
// closed afterwards. A fresh connection tests what a new request would meet
// (a worker can keep old connections alive after it stopped accepting), and
// keeping none idle means the client leaves no background goroutine behind.
type workerClient struct {
	timeout time.Duration     // of an active check
	apiKey  string            // bearer token of recovery probes; empty sends none
	dialer  *workerurl.Dialer // nil: the default host policy's
}

// client returns a one-connection client for t whose connections dial asks
// to close when ctx ends.
func (p workerClient) client(ctx context.Context, t probeTarget, dial *ctxDialer, timeout time.Duration) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                      t.addr,
		IsTLS:                     t.isTLS,
		Name:                      "kvrouter-health",
		Dial:                      func(addr string) (net.Conn, error) { return dial.dial(ctx, p.dialer, addr, timeout) },
		MaxConns:                  1,
		MaxIdemponentCallAttempts: 1,
		ReadTimeout:               timeout,
		WriteTimeout:              timeout,
		MaxResponseBodySize:       maxProbeBody,
	}
}

// probe returns nil when t's health endpoint answers 2xx within the timeout.
// Cancelling ctx aborts the probe by closing its connection.
func (p workerClient) probe(ctx context.Context, t probeTarget) error {
	var dial ctxDialer
	defer dial.release()
	hc := p.client(ctx, t, &dial, p.timeout)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(t.uri)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetConnectionClose()
	if err := hc.DoTimeout(req, resp, p.timeout); err != nil {
		return fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	if code := resp.StatusCode(); code < 200 || code > 299 {
		return fmt.Errorf("%w: status %d", ErrProbeFailed, code)
	}
	return nil
}

// ctxDialer dials connections that are closed when ctx ends, so that a
// cancelled check round does not wait for its probes' timeouts.
type ctxDialer struct {
	mu    sync.Mutex
	stops []func() bool
}

func (d *ctxDialer) dial(ctx context.Context, wd *workerurl.Dialer, addr string, timeout time.Duration) (net.Conn, error) {
	if wd == nil {
		wd = &workerurl.Dialer{}
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := wd.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	d.mu.Lock()
	d.stops = append(d.stops, stop)
	d.mu.Unlock()
	return conn, nil
}

// release detaches the connections from ctx once the probe is over.
func (d *ctxDialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, stop := range d.stops {
		stop()
	}
	d.stops = nil
}
