package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// exchange is one client request on its way through the proxy, from the
// handler to the last byte of its response.
type exchange struct {
	ctx      *fasthttp.RequestCtx
	ep       *endpoint
	in       inference
	id       string
	start    time.Time
	deadline time.Time // no attempt starts after it (--request-timeout-secs)
	body     []byte    // the client's body, as received
	// header is what every worker is sent of the client's request headers:
	// hop-by-hop ones removed, x-request-id and the default API key set.
	// Attempts copy it, so they never read the client's RequestCtx, and may
	// run on goroutines of their own (the concurrent P/D prefill).
	header *fasthttp.RequestHeader
	uri    string // the client's request URI, to go under each worker's base path

	// reqCtx ends when the client leaves (cause ErrClientGone), when the
	// router gives up on the request (an abortError), or when it is done.
	reqCtx context.Context
	cancel context.CancelCauseFunc
	watch  *clientWatch
	gone   atomic.Bool // the client left; counted once

	errType   string        // why the router refused or failed the request, for the metrics
	route     route         // how it was routed, for the request log
	trace     *requestTrace // its span, when tracing
	firstByte time.Time     // when a stream's first bytes went out: its time to first token

	pd          bool                   // disaggregated: its errors count in pd_errors_total
	failedPhase atomic.Pointer[string] // the P/D phase that failed, if one did (set by the concurrent prefill too)
}

// newExchange starts the exchange of ctx's request.
func (p *Proxy) newExchange(ctx *fasthttp.RequestCtx, ep *endpoint) *exchange {
	start := time.Now()
	x := &exchange{ctx: ctx, ep: ep, start: start, deadline: start.Add(p.cfg.RequestTimeout), id: p.requestID(ctx),
		body: ctx.PostBody(), uri: string(ctx.RequestURI())}
	ctx.Response.Header.Set("x-request-id", x.id)
	return x
}

// serveInference handles the inference endpoints.
func (p *Proxy) serveInference(ctx *fasthttp.RequestCtx, ep *endpoint) {
	x := p.newExchange(ctx, ep)
	if !p.authorized(ctx) {
		p.metrics.request(ep, fasthttp.StatusUnauthorized, "unauthorized", x.start)
		return
	}
	if err := p.admission.admit(p.ctx); err != nil {
		p.refuse(x, err)
		p.metrics.request(ep, ctx.Response.StatusCode(), x.errType, x.start)
		return
	}
	streaming := false
	defer func() {
		if !streaming {
			p.done(x, x.ctx.Response.StatusCode(), false)
		}
	}()
	in, err := parseInference(ep, x.body)
	if err != nil {
		p.refuse(x, err)
		return
	}
	x.in = in
	if err := p.awaitReady(x); err != nil {
		p.refuse(x, err)
		return
	}
	disaggregated := p.pd != nil && ep.pd
	pool, err := p.fleet.view().pool(p.finalRole(), in.model)
	if err != nil {
		p.refuse(x, err)
		return
	}
	p.begin(x)
	var key uint64 // hashing a large body is wasted on every policy but consistent_hash
	if p.usesSessionKey() {
		key = sessionKey(ctx.Request.Header.Peek("X-Session-ID"), in, x.body)
	}
	if disaggregated {
		streaming = p.pd.serve(x, pool, key)
		return
	}
	if in.previous != "" {
		streaming = p.continueResponse(x)
		return
	}
	router := p.finalRouter()
	l := &leg{router: router, req: router.Prepare(in.model, in.text, key), pool: pool,
		body: x.body, attempts: p.cfg.Retry.MaxAttempts, stream: true, toClient: true}
	streaming = p.serveLeg(x, l)
}

// maxReadyWait bounds how long a request that arrives before the replica is
// ready waits for it.
const maxReadyWait = 30 * time.Second

// awaitReady holds a request that came before the registry was loaded.
func (p *Proxy) awaitReady(x *exchange) error {
	if p.deps.Ready == nil {
		return nil
	}
	select {
	case <-p.deps.Ready:
		return nil
	default:
	}
	t := time.NewTimer(min(maxReadyWait, time.Until(x.deadline)))
	defer t.Stop()
	select {
	case <-p.deps.Ready:
		return nil
	case <-t.C:
		return errorf(ErrNoWorker, "the replica has not loaded its registry yet")
	case <-p.ctx.Done():
		return errorf(ErrNoWorker, "the replica is shutting down")
	}
}

// finalRouter is the router of the workers whose answer the client gets.
func (p *Proxy) finalRouter() *affinity.Router {
	rs := p.routers.Load()
	if rs.pd != nil {
		return rs.pd.Decode
	}
	return rs.regular
}

// begin readies x for attempts: the upstream header template, the context
// that aborts them, and the watch for a client that leaves.
func (p *Proxy) begin(x *exchange) {
	x.header = p.upstreamHeader(x)
	p.startTrace(x)
	x.reqCtx, x.cancel = context.WithCancelCause(p.ctx)
	x.watch = watchClient(x.ctx.Conn(), requestProber(x.ctx.Request.Header.IsHTTP11()), func() { p.clientGone(x) })
}

// serveLeg runs the leg whose answer is the client's, and reports whether
// the response is streamed (it then ends later, in the stream's Close).
func (p *Proxy) serveLeg(x *exchange, l *leg) (streaming bool) {
	live, ans, err := p.try(x, l)
	switch {
	case live != nil:
		if x.ep == responses {
			p.learnOwner(live.m.ID, live.first)
		}
		p.stream(x, live)
		return true
	case ans != nil:
		ans.deliver(x)
		x.route.tokens = completionTokens(x.ctx.Response.Body())
		if x.ep == responses && ans.status/100 == 2 {
			p.learnOwner(ans.worker, x.ctx.Response.Body())
		}
	default:
		p.refuse(x, err)
	}
	return false
}

// refuse answers the client with the router's own error; a client that
// left gets nothing (the 499 keeps the metrics honest).
func (p *Proxy) refuse(x *exchange, err error) {
	x.errType = errorType(err)
	if isGone(err) {
		x.ctx.SetConnectionClose()
		x.ctx.Response.ResetBody()
		x.ctx.SetStatusCode(statusClientGone)
		return
	}
	writeError(x.ctx, err)
}

// statusClientGone is what the metrics record for a client that left.
const statusClientGone = 499

// clientGone records, once, that the client went away, and aborts the
// upstream exchange so the engine stops generating.
func (p *Proxy) clientGone(x *exchange) {
	if x.gone.CompareAndSwap(false, true) {
		p.metrics.disconnects.Inc()
	}
	x.cancel(ErrClientGone)
}

// done ends the exchange: the watch, what is left of its attempts, its
// admission slot, and its count in the metrics, as the client saw it.
func (p *Proxy) done(x *exchange, status int, cut bool) {
	x.watch.stop()
	if x.cancel != nil {
		x.cancel(nil)
	}
	errType := x.errType
	switch {
	case x.gone.Load():
		status, errType = statusClientGone, "client_disconnected"
	case cut:
		errType = "stream_cut"
	case errType == "" && status >= 400:
		errType = workerErrorType(status)
	}
	p.metrics.request(x.ep, status, errType, x.start)
	p.logRequest(x, status, errType)
	x.endTrace(status, errType)
	if !x.firstByte.IsZero() {
		p.metrics.ttft.Update(x.firstByte.Sub(x.start).Seconds())
	}
	if x.pd {
		p.metrics.pdDuration.UpdateDuration(x.start)
		p.pd.countFailure(x, status, cut)
	}
}

// workerErrorType names the failure of a worker's own answer passed on.
func workerErrorType(status int) string {
	switch {
	case status == fasthttp.StatusTooManyRequests:
		return "worker_rate_limited"
	case status >= 500:
		return "worker_server_error"
	}
	return "worker_client_error"
}

// usesSessionKey reports whether any policy of the request path hashes a
// session key (consistent_hash).
func (p *Proxy) usesSessionKey() bool {
	if p.pd != nil {
		return p.pd.usesSessionKey()
	}
	return p.routers.Load().regular.Policy().Name() == affinity.PolicyConsistentHash
}

// hopHeaders are connection-level headers that never cross the proxy.
// Expect is among them: the router has the whole body before any worker is
// chosen.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

// upstreamHeader is the header template of x's upstream requests.
func (p *Proxy) upstreamHeader(x *exchange) *fasthttp.RequestHeader {
	h := new(fasthttp.RequestHeader)
	x.ctx.Request.Header.CopyTo(h)
	for _, name := range hopHeaders {
		h.Del(name)
	}
	if p.deps.Tracer != nil {
		h.Del("traceparent") // each attempt sends its own
		h.Del("tracestate")
	}
	h.Set("x-request-id", x.id)
	if p.keys.enabled() {
		h.Del("Authorization") // the client's key is the router's, not the workers'
	}
	if p.cfg.APIKey != "" && len(h.Peek("Authorization")) == 0 {
		h.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	return h
}

// upstreamRequest fills req, the request of one attempt on worker m.
func (x *exchange) upstreamRequest(m *member, req *fasthttp.Request, body []byte) {
	x.header.CopyTo(&req.Header)
	req.Header.SetHost(m.base.Addr())
	req.SetRequestURI(m.base.Under(x.uri))
	req.SetBodyRaw(body)
}
