package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// errRequestTimeout is the cancellation cause of a request that ran past --request-timeout.
var errRequestTimeout = errors.New("request timeout")

// errBadTarget reports a --target that is not an http(s) URL.
var errBadTarget = errors.New("want an http:// or https:// URL with a host")

// completionsPath is where requests go when --target names only a server.
const completionsPath = "/v1/completions"

// readBufferSize is the buffer a stream is read through: large enough for any ordinary chunk.
const readBufferSize = 32 << 10

// readers pools the stream read buffers, so that a request allocates none.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// client streams completion requests to one target.
//
// It is built on net/http rather than fasthttp's client: cancelling a request that is blocked in
// a read (Ctrl-C, --duration, --request-timeout) must close its connection at once, which
// net/http does through the request's context and fasthttp's client cannot do for a streamed
// body. Throughput is not lost by this: the transport keeps one idle keep-alive connection per
// concurrent request, bodies are read through pooled buffers, and only the chunks that carry
// usage are parsed; BenchmarkClientStream measures the cost per request.
//
// A client is safe for concurrent use; close releases its idle connections.
type client struct {
	url       string
	apiKey    string // sent as a bearer token when set
	clock     Clock
	timeout   time.Duration // per request, from sending to the end of the stream
	transport *http.Transport
	http      *http.Client
}

// newClient returns a client for target: a server URL, to which /v1/completions is appended
// unless the URL already ends with it.
func newClient(target, apiKey string, timeout time.Duration, clock Clock) (*client, error) {
	endpoint, err := completionsURL(target)
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:               nil, // a load generator measures the target, not a proxy on the way
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1 << 16, // keep every connection: reconnecting costs more than idling
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // event streams must arrive as they are produced
		// Prompts run to hundreds of kilobytes: a larger buffer sends one in a few writes.
		WriteBufferSize:     64 << 10,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &client{
		url: endpoint, apiKey: apiKey, clock: clock, timeout: timeout,
		transport: transport, http: &http.Client{Transport: transport},
	}, nil
}

// completionsURL validates target and returns the completions endpoint under it.
func completionsURL(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w, got %q", errBadTarget, target)
	}
	if !strings.HasSuffix(u.Path, completionsPath) {
		u.Path = strings.TrimSuffix(u.Path, "/") + completionsPath
	}
	return u.String(), nil
}

// close releases the idle connections (and so their goroutines).
func (c *client) close() { c.transport.CloseIdleConnections() }

// do sends req as a streamed completion and follows the stream to its end. header adds request
// headers (nil for none). ctx is the run: when it ends, the request is abandoned and reported
// cancelled.
func (c *client) do(ctx context.Context, req workload.Request, header http.Header) result {
	res := result{turn: -1}
	reqCtx, cancel := withClockTimeout(ctx, c.clock, c.timeout, errRequestTimeout)
	defer cancel()
	httpReq, err := c.newRequest(reqCtx, req, header)
	if err != nil {
		return c.failed(ctx, reqCtx, res, kindTransport, err)
	}
	start := c.clock.Now()
	resp, err := c.http.Do(httpReq)
	if err != nil {
		res.latency = c.clock.Now().Sub(start)
		return c.failed(ctx, reqCtx, res, kindTransport, err)
	}
	defer resp.Body.Close()
	res.status, res.worker = resp.StatusCode, resp.Header.Get("x-worker-id")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection
		res.latency = c.clock.Now().Sub(start)
		return c.failed(ctx, reqCtx, res, statusKind(resp.StatusCode), fmt.Errorf("status %d", resp.StatusCode))
	}
	kind, err := c.follow(resp.Body, start, &res)
	res.latency = c.clock.Now().Sub(start)
	if err != nil {
		return c.failed(ctx, reqCtx, res, kind, err)
	}
	return res
}

// newRequest builds the HTTP request of req.
func (c *client) newRequest(ctx context.Context, req workload.Request, header http.Header) (*http.Request, error) {
	body := req.OpenAIBody(true)
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for name, values := range header {
		httpReq.Header[name] = values
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return httpReq, nil
}

// follow reads the event stream of a 2xx response into res, until [DONE] or the stream's end.
// On failure it returns the error kind.
func (c *client) follow(body io.Reader, start time.Time, res *result) (string, error) {
	in := readers.Get().(*bufio.Reader)
	in.Reset(body)
	defer func() {
		in.Reset(nil)
		readers.Put(in)
	}()
	events := newSSEReader(in)
	var stream completionStream
	defer func() {
		res.events = stream.events
		if stream.usage != nil {
			u := *stream.usage // a copy: the stream and its parser are not kept
			res.usage = &u
		}
	}()
	for !stream.done {
		data, err := events.next()
		if err == io.EOF {
			return kindStreamCut, errStreamCut
		}
		if err != nil {
			return kindTransport, err
		}
		if res.ttft == 0 {
			res.ttft = max(c.clock.Now().Sub(start), time.Nanosecond)
		}
		if err := stream.onEvent(data); err != nil {
			return streamErrorKind(err), err
		}
	}
	return "", nil
}

// streamErrorKind classifies an error of completionStream.onEvent.
func streamErrorKind(err error) string {
	if errors.Is(err, errStreamError) {
		return kindStreamError
	}
	return kindBadUsage
}

// failed completes res as a failure: cancelled when the run is over, a timeout when the
// request's own deadline passed, else an error of kind.
func (c *client) failed(run, req context.Context, res result, kind string, err error) result {
	switch {
	case run.Err() != nil:
		res.cancelled = true
	case errors.Is(context.Cause(req), errRequestTimeout):
		res.errKind, res.err = kindTimeout, errRequestTimeout
	default:
		res.errKind, res.err = kind, err
	}
	return res
}
