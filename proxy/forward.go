package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// exchangeState is one client request on its way through the proxy.
type exchangeState struct {
	ctx    *fasthttp.RequestCtx
	ep     endpoint
	in     inference
	id     string
	start  time.Time
	cancel context.CancelFunc // closes the upstream connection
	reqCtx context.Context
	watch  *clientWatch
	gone   sync.Once
	// body is what the final worker receives: the client's body, or in
	// disaggregated mode the body with the prefill's transfer parameters.
	body []byte
	// aborted is why the router itself cancelled the exchange (the other
	// half of a concurrent P/D request failed), as opposed to the client
	// leaving.
	aborted atomic.Pointer[error]
}

// abort cancels the exchange because of err.
func (x *exchangeState) abort(err error) {
	x.aborted.Store(&err)
	x.cancel()
}

// abortCause is the error abort was given, or nil.
func (x *exchangeState) abortCause() error {
	if e := x.aborted.Load(); e != nil {
		return *e
	}
	return nil
}

// clientGone records, once, that the client went away, and aborts the
// upstream exchange so the engine stops generating.
func (p *Proxy) clientGone(x *exchangeState) {
	x.gone.Do(func() {
		p.metrics.disconnects.Inc()
		x.cancel()
	})
}

// serveInference handles /v1/completions and /v1/chat/completions.
func (p *Proxy) serveInference(ctx *fasthttp.RequestCtx, ep endpoint) {
	x := &exchangeState{ctx: ctx, ep: ep, start: time.Now(), id: p.requestID(ctx)}
	ctx.Response.Header.Set("x-request-id", x.id)
	if err := p.admit(); err != nil {
		p.fail(x, err)
		return
	}
	streaming := false
	defer func() {
		if !streaming {
			p.inflight.Add(-1)
		}
	}()
	in, err := parseInference(ep, ctx.PostBody())
	if err != nil {
		p.fail(x, err)
		return
	}
	x.in = in
	pool, err := p.fleet.view().pool(p.finalRole(), in.model)
	if err != nil {
		p.fail(x, err)
		return
	}
	x.body = ctx.PostBody()
	x.reqCtx, x.cancel = context.WithCancel(p.ctx)
	x.watch = watchClient(ctx.Conn(), func() { p.clientGone(x) })
	var key uint64 // hashing a large body is wasted on every policy but consistent_hash
	if p.deps.Router.Policy().Name() == affinity.PolicyConsistentHash || (p.pd != nil && p.pd.usesSessionKey()) {
		key = sessionKey(ctx.Request.Header.Peek("X-Session-ID"), in, ctx.PostBody())
	}
	if p.pd != nil {
		streaming = p.pd.serve(x, pool, key)
	} else {
		req := p.deps.Router.Prepare(in.model, in.text, key)
		streaming = p.dispatch(x, p.deps.Router, req, pool, nil, p.cfg.Retry.MaxAttempts)
	}
	if !streaming {
		p.finish(x)
	}
}

// admit enforces --max-concurrent-requests.
func (p *Proxy) admit() error {
	n := p.inflight.Add(1)
	if max := p.cfg.MaxConcurrentRequests; max > 0 && n > int64(max) {
		p.inflight.Add(-1)
		return errorf(ErrTooManyRequests, "the router is at its limit of %d concurrent requests", max)
	}
	return nil
}

// finish ends a request whose response is complete in ctx.
func (p *Proxy) finish(x *exchangeState) {
	if x.watch != nil && x.watch.stop() {
		x.ctx.SetConnectionClose()
	}
	if x.cancel != nil {
		x.cancel()
	}
	p.metrics.request(x.ep, x.ctx.Response.StatusCode(), x.start)
}

func (p *Proxy) fail(x *exchangeState, err error) {
	writeError(x.ctx, err)
	p.metrics.request(x.ep, x.ctx.Response.StatusCode(), x.start)
}

// routed is a worker chosen (and reserved) ahead of its dispatch.
type routed struct {
	dec   affinity.Decision
	guard *affinity.Guard
}

// route selects a worker, or hands out the one chosen ahead (once).
func (r *routed) take(router *affinity.Router, req *affinity.Request, pool *affinity.Pool) (affinity.Decision, *affinity.Guard, error) {
	if r != nil && r.guard != nil {
		d, g := r.dec, r.guard
		r.guard = nil
		return d, g, nil
	}
	return router.Route(req, pool)
}

// dispatch runs up to maxAttempts attempts of one request on workers of
// pool, the first of them on first when given, and reports whether the
// response is being streamed (and so finishes later, in the stream writer).
func (p *Proxy) dispatch(x *exchangeState, router *affinity.Router, req *affinity.Request, pool *affinity.Pool, first *routed, maxAttempts int) (streaming bool) {
	var tried []affinity.WorkerID
	var lastErr error
	retrying := false
	for attempt := 0; attempt < maxAttempts; {
		if retrying {
			retrying = false
			p.metrics.retries.Inc()
			if !p.backoff(x.reqCtx, attempt) {
				lastErr = ErrClientGone
				break
			}
		}
		dec, guard, err := first.take(router, req, pool.Without(tried...))
		if err != nil {
			if lastErr == nil {
				lastErr = errorf(ErrNoWorker, "no eligible worker for model %q", x.in.model)
			}
			break
		}
		tried = append(tried, dec.Worker)
		track, err := p.deps.Health.Begin(dec.Worker)
		if err != nil {
			guard.Release() // the circuit refused it: choose again, at no cost of an attempt
			lastErr = errorf(ErrNoWorker, "worker %d refused by its circuit breaker", dec.Worker)
			tried = tried[:len(tried)-1]
			pool = pool.Without(dec.Worker)
			continue
		}
		p.metrics.decision(dec)
		attempt++
		out := p.attempt(x, dec.Worker, guard, track, attempt == maxAttempts)
		if out.retry == nil {
			return out.streaming
		}
		lastErr, retrying = out.retry, true
		if errors.Is(lastErr, ErrClientGone) {
			break
		}
	}
	if cause := x.abortCause(); cause != nil {
		lastErr = cause
	}
	if errors.Is(lastErr, ErrClientGone) {
		x.ctx.SetConnectionClose()
		x.ctx.SetStatusCode(499) // nobody reads it; it keeps the metrics honest
		return false
	}
	writeError(x.ctx, lastErr)
	return false
}

// attemptResult is how one attempt ended: a response handed to the client
// (streaming or not), or an error worth another worker.
type attemptResult struct {
	streaming bool
	retry     error
}

// retryableStatus are the statuses that, before any byte reached the client,
// send the request to another worker.
func retryableStatus(code int) bool {
	switch code {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// attempt sends the request to one worker. It owns guard: every path below
// releases it exactly once, streaming ones when the stream ends.
func (p *Proxy) attempt(x *exchangeState, w affinity.WorkerID, guard *affinity.Guard, track Attempt, last bool) attemptResult {
	m := p.fleet.view().members[w]
	if m == nil {
		guard.Release()
		track.End(Canceled)
		return attemptResult{retry: errorf(ErrNoWorker, "worker %d left the registry", w)}
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	p.upstreamRequest(x, m, req, x.body)
	resp := fasthttp.AcquireResponse()
	conn, err := m.up.exchange(x.reqCtx, req, resp, x.start.Add(p.cfg.RequestTimeout))
	if err != nil {
		guard.Release()
		fasthttp.ReleaseResponse(resp)
		track.End(failedOrCanceled(err))
		return attemptResult{retry: p.upstreamError(m, err)}
	}
	status := resp.StatusCode()
	if retryableStatus(status) && !last {
		m.up.release(conn, false)
		fasthttp.ReleaseResponse(resp)
		guard.Release()
		track.End(outcomeOf(status))
		return attemptResult{retry: errorf(ErrUpstream, "worker %s answered %d", m.URL, status)}
	}
	copyResponseHeader(&x.ctx.Response, resp)
	x.ctx.SetStatusCode(status)
	if x.in.stream || bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		p.relay(x, m, conn, resp, guard, track, status)
		return attemptResult{streaming: true}
	}
	return p.buffered(x, m, conn, resp, guard, track, status)
}

// buffered reads a whole (non-streaming) response and hands it to the client.
func (p *Proxy) buffered(x *exchangeState, m *member, conn *upConn, resp *fasthttp.Response, guard *affinity.Guard, track Attempt, status int) attemptResult {
	defer fasthttp.ReleaseResponse(resp)
	body, err := io.ReadAll(resp.BodyStream())
	reusable := err == nil && !resp.ConnectionClose()
	_ = resp.CloseBodyStream()
	m.up.release(conn, reusable)
	guard.Release()
	if err != nil && x.reqCtx.Err() != nil {
		err = ErrClientGone
	}
	if err != nil {
		track.End(failedOrCanceled(err))
		x.ctx.Response.Reset()
		x.ctx.Response.Header.Set("x-request-id", x.id)
		return attemptResult{retry: p.upstreamError(m, err)}
	}
	track.Progress(0)
	track.End(outcomeOf(status))
	x.ctx.SetBody(body)
	return attemptResult{}
}

// relay streams the response body to the client chunk by chunk, flushing
// each, from fasthttp's stream writer: a goroutine of its own that always
// runs, and must not touch the RequestCtx, which belongs to the server
// goroutine once the handler returned. The guard is released when the stream
// ends, however it ends.
func (p *Proxy) relay(x *exchangeState, m *member, conn *upConn, resp *fasthttp.Response, guard *affinity.Guard, track Attempt, status int) {
	watch := x.watch
	x.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer p.inflight.Add(-1)
		defer fasthttp.ReleaseResponse(resp)
		defer func() {
			if watch.stop() {
				watch.conn.Close() // the client pipelined a request we consumed a byte of
			}
			x.cancel()
			p.metrics.request(x.ep, status, x.start)
		}()
		complete, clientGone := pump(w, resp.BodyStream(), track)
		_ = resp.CloseBodyStream()
		if clientGone {
			p.clientGone(x)
		}
		clientGone = clientGone || x.reqCtx.Err() != nil
		m.up.release(conn, complete && !resp.ConnectionClose())
		guard.Release()
		switch {
		case clientGone:
			track.End(Canceled)
		case complete:
			track.End(outcomeOf(status))
		default:
			track.End(Failed)
		}
	})
}

// pump copies src to w, flushing after every read so that each SSE event
// reaches the client as soon as the worker sends it. It reports whether src
// ended cleanly and whether the client went away.
func pump(w *bufio.Writer, src io.Reader, track Attempt) (complete, clientGone bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			track.Progress(bytes.Count(buf[:n], []byte("data:")))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, true
			}
			if werr := w.Flush(); werr != nil {
				return false, true
			}
		}
		if err == io.EOF {
			return true, false
		}
		if err != nil {
			return false, false
		}
	}
}

func failedOrCanceled(err error) Outcome {
	if errors.Is(err, ErrClientGone) {
		return Canceled
	}
	return Failed
}

// upstreamError classifies a failed exchange.
func (p *Proxy) upstreamError(m *member, err error) error {
	switch {
	case errors.Is(err, ErrClientGone):
		return err
	case isTimeout(err):
		return errorf(ErrUpstreamTimeout, "worker %s timed out", m.URL)
	}
	return errorf(ErrUpstream, "worker %s failed: %v", m.URL, err)
}

// backoff waits before retry number attempt, with exponential growth and
// jitter; it returns false if the client left meanwhile.
func (p *Proxy) backoff(ctx context.Context, attempt int) bool {
	r := p.cfg.Retry
	d := float64(r.InitialBackoff)
	for range attempt - 1 {
		d *= r.Multiplier
	}
	d = min(d, float64(r.MaxBackoff))
	d *= 1 + r.Jitter*(2*rand.Float64()-1)
	t := time.NewTimer(time.Duration(d))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// hopHeaders are connection-level headers that never cross the proxy.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// upstreamRequest builds the request to worker m from the client's.
func (p *Proxy) upstreamRequest(x *exchangeState, m *member, req *fasthttp.Request, body []byte) {
	x.ctx.Request.Header.CopyTo(&req.Header)
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Header.SetHost(m.host)
	req.SetRequestURI(string(x.ctx.RequestURI()))
	req.Header.Set("x-request-id", x.id)
	if p.cfg.APIKey != "" && len(req.Header.Peek("Authorization")) == 0 {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	req.SetBodyRaw(body)
}

// copyResponseHeader passes the worker's headers through, less hop-by-hop
// ones and the length, which fasthttp sets for the body it writes.
func copyResponseHeader(dst *fasthttp.Response, src *fasthttp.Response) {
	id := append([]byte(nil), dst.Header.Peek("x-request-id")...)
	src.Header.CopyTo(&dst.Header)
	for _, h := range hopHeaders {
		dst.Header.Del(h)
	}
	dst.Header.Del("Content-Length")
	dst.Header.Set("x-request-id", string(id))
}
