package proxy

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/edge"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/identity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
	"github.com/kvrouter/kvrouter/proxy/requestlog"
	"github.com/kvrouter/kvrouter/proxy/tracing"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// exchange is one client request on its way through the proxy, from the
// door to the last byte of its response. Every exchange ends in finish,
// once, whichever way it went.
type exchange struct {
	path     *requestPath // the collaborators that serve it
	ctx      *fasthttp.RequestCtx
	ep       *wire.Endpoint
	in       wire.Inference
	id       []byte // the request id, in idBuf when it fits
	idBuf    [32]byte
	start    time.Time
	deadline time.Time // no attempt starts after it (--request-timeout-secs)
	body     []byte    // the client's body, as received
	// bodyBuf is the pooled buffer body was read into (nil when none), and
	// keptBody says the exchange keeps it past its handler, for a stream
	// that may resume: finish then gives it back.
	bodyBuf  *[]byte
	keptBody bool
	text     *wire.RoutingText // what in.text is held in, from textBuffers; returned by finish
	// up is the request every worker is sent, from fasthttp's pool: the
	// client's headers less hop-by-hop ones, x-request-id and the default
	// API key set; each attempt sets its worker's host and path and its
	// body. Attempts never read the client's RequestCtx, so they may run on
	// goroutines of their own (the concurrent P/D prefill, which has its own
	// copy).
	up *fasthttp.Request
	// uri is the request URI the router routed and checked the key on,
	// fasthttp's normalised path (dot segments resolved, %2F decoded) with
	// the query: to go under each worker's base path. The raw URI never
	// goes out: /admin/..%2Fv1/completions would reach the worker as
	// something else than what the router approved.
	uri []byte

	// life ends when the client leaves (cause failure.ErrClientGone), when the
	// router gives up on the request (a failure.Abort) or shuts down, or when
	// it finishes. abort ends it and cuts the upstream connection.
	life  exchangeCtx
	begun bool      // begin ran: finish has its attempts' state to end
	guard connGuard // the upstream connection of the attempt under way
	// first is the first attempt, final the answer delivered from the
	// response: they live here to save allocations.
	first      attempt
	firstTaken bool
	final      answer
	// the proxy's list of exchanges in flight, guarded by its lock
	prev, next *exchange
	flying     bool
	watch      *clientWatch // reqWatch, then the stream's
	// reqWatch is the watch while no byte of the response was written.
	reqWatch clientWatch
	gone     atomic.Bool // the client left; counted once
	// mayResume: its answer is a stream that may resume (relay.go), one
	// that preemption may ask to give way.
	mayResume atomic.Bool

	route requestlog.Route // how it was routed, for the request log
	// counters are those of the worker whose answer the client got, for
	// its tally; nil without metrics.
	counters  *pathmetrics.WorkerCounters
	shared    *sharedPrompt    // its prompt's tokens for the tier's keeper, when shared (tokenize_share.go)
	trace     *tracing.Request // its span, when tracing
	firstByte time.Time        // when a stream's first bytes went out: its time to first token
	routed    time.Time        // when its first worker was chosen: the door and the decision behind it

	ticket      *admission.Ticket      // its admission slot, released by finish
	caller      identity.Caller        // who it says it is, as the door read it
	responseID  string                 // the id the router chose for the response a POST /v1/responses makes
	pd          bool                   // disaggregated: its errors count in pd_errors_total
	failedPhase atomic.Pointer[string] // the P/D phase that failed, if one did (set by the concurrent prefill too)
}

// newExchange starts the exchange of ctx's request to endpoint ep, at
// start: when the door let it in, or when it came to the door that refused
// it. tk is its admission, nil when it took none; finish releases it. The
// body is not read here: a request refused at the door keeps what it did
// not send.
func newExchange(path *requestPath, ctx *fasthttp.RequestCtx, ep *wire.Endpoint, start time.Time, tk *admission.Ticket) *exchange {
	x := &exchange{path: path, ctx: ctx, ep: ep, start: start, deadline: start.Add(path.timeout),
		uri: ctx.URI().RequestURI(), ticket: tk}
	x.id = path.rec.requestID(ctx, x.idBuf[:0])
	ctx.Response.Header.SetBytesV("x-request-id", x.id)
	x.trace = tracing.Start(path.rec.tracer, &ctx.Request.Header, ep.Path, start, x.id)
	return x
}

// plan says where an exchange that passed the door goes: the leg whose
// answer is the client's, or the error to refuse it with. A plan that
// returns neither has answered the client itself (the prefill worker's own
// answer, when a disaggregated request's prefill failed). A plan that
// returns a leg has begun the exchange.
type plan func(x *exchange) (*leg, error)

// serve is the one skeleton of every exchange the door let in, whatever
// its route (a regular, disaggregated or continued inference request, a
// request about a stored response, one about the engine): its plan, then
// its leg, and its end, in finish, on every path.
func (x *exchange) serve(planned plan) {
	x.body = x.ctx.PostBody() // read by the door, whole
	l, err := planned(x)
	switch {
	case err != nil:
		x.refuse(err)
	case l == nil:
		x.finish(ending{status: x.ctx.Response.StatusCode()})
	default:
		x.serveLeg(l)
	}
}

// planInference is the plan of the inference endpoints: the body parsed
// and seen by the hooks, the replica ready, then the leg a hook plans (the
// decode leg of a disaggregated request, the leg to the worker that holds
// the response a Responses API request continues), else the regular leg,
// which the hooks may add to (the prompt's tokens).
func (x *exchange) planInference() (*leg, error) {
	if err := x.parse(); err != nil {
		return nil, err
	}
	if err := x.path.hooks.parsed(x); err != nil {
		return nil, err
	}
	if err := x.path.ready.await(x); err != nil {
		return nil, err
	}
	legs := x.path.legs
	router := legs.finalRouter()
	pool, err := legs.poolFor(x, router, legs.finalRole(), x.in.Model)
	if err != nil {
		return nil, err
	}
	x.begin()
	key := legs.sessionKey(x)
	if l, planned, err := x.path.hooks.planLeg(x, pool, key); planned {
		return l, err
	}
	l := legs.newLeg(x, "", router, legs.prepare(router, x, key), pool)
	x.path.hooks.attach(x, l.req, pool)
	return l, nil
}

// parse reads x's body into x.in, its routing text into a buffer of
// wire.TakeText that finish returns.
func (x *exchange) parse() error {
	x.text = wire.TakeText()
	in, err := wire.Parse(x.ep, x.body, x.text)
	x.in = in
	return err
}

// maxReadyWait bounds how long a request that arrives before the replica is
// ready waits for it.
const maxReadyWait = 30 * time.Second

// readyGate holds the requests that come before the registry was loaded
// (Deps.Ready), at most maxReadyWait, and no longer than the replica lives.
type readyGate struct {
	ready <-chan struct{} // nil: ready from the start
	life  context.Context // the replica's
}

// await holds x until the replica is ready, or fails.
func (r readyGate) await(x *exchange) error {
	if r.ready == nil {
		return nil
	}
	select {
	case <-r.ready:
		return nil
	default:
	}
	t := time.NewTimer(min(maxReadyWait, time.Until(x.deadline)))
	defer t.Stop()
	select {
	case <-r.ready:
		return nil
	case <-t.C:
		return failure.Errorf(failure.ErrNoWorker, "the replica has not loaded its registry yet")
	case <-r.life.Done():
		return failure.Errorf(failure.ErrNoWorker, "the replica is shutting down")
	}
}

// begin readies x for attempts: the upstream request, the context that
// aborts them, and the watch for a client that leaves.
func (x *exchange) begin() {
	x.up = x.path.headers.request(x)
	x.begun = true
	x.path.flights.add(x) // shutdown aborts it
	x.watch = &x.reqWatch
	x.path.watcher.start(x.watch, x.ctx.Conn(), requestProber(x.ctx.Request.Header.IsHTTP11()), x, x.start)
}

// serveLeg runs the leg whose answer is the client's, and ends x: now, with
// a whole answer or the router's error, or, with a streamed answer, when
// its relay closes.
func (x *exchange) serveLeg(l *leg) {
	live, ans, err := x.path.send.try(x, l)
	switch {
	case live != nil:
		x.path.hooks.streamStarted(x, live)
		x.stream(live, l)
	case ans != nil:
		ans.deliver(x)
		body := x.ctx.Response.Body()
		u := usageOf(body)
		l.judge(ans.status, u)
		x.path.hooks.heard(x, ans.worker, ans.status, body)
		x.finish(ending{status: x.ctx.Response.StatusCode(), tokens: requestlog.CompletionTokens(body), usage: u})
	default:
		x.refuse(err)
	}
}

// refuse answers the client with the router's own error, and ends x; a
// client that left gets nothing (the 499 keeps the metrics honest).
func (x *exchange) refuse(err error) {
	if failure.IsGone(err) {
		x.ctx.SetConnectionClose()
		x.ctx.Response.ResetBody()
		x.ctx.SetStatusCode(statusClientGone)
	} else {
		failure.Write(x.ctx, err)
	}
	x.finish(ending{status: x.ctx.Response.StatusCode(), errType: failure.Type(err)})
}

// statusClientGone is what the metrics record for a client that left.
const statusClientGone = 499

// clientGone records, once, that the client went away, and aborts the
// upstream exchange so the engine stops generating.
func (x *exchange) clientGone() {
	if x.gone.CompareAndSwap(false, true) {
		x.path.rec.metrics.Disconnects.Inc()
	}
	x.abort(failure.ErrClientGone)
}

// abort ends x's attempts with cause: the context first, so that whoever
// finds the upstream connection cut also finds why.
func (x *exchange) abort(cause error) {
	x.life.end(cause)
	x.guard.abort()
}

// ending is how an exchange ended, as the client saw it: what finish
// records.
type ending struct {
	status  int
	errType string // why the router refused or failed it; "" when a worker's answer was passed on
	cut     bool   // a stream the router cut after its first byte
	tokens  int    // generated tokens, as the whole answer or the stream said
	usage   core.Usage
}

// finish is the one end of every exchange, refused at the door, refused
// later, answered whole or streamed, and runs exactly once: it ends the
// watch and what is left of the attempts, releases the admission slot, and
// records the request as the client saw it, in the metrics, the request
// log, the worker's tally and the trace.
func (x *exchange) finish(e ending) {
	x.watch.stop()
	wire.ReleaseText(x.text)
	x.text = nil
	if x.up != nil {
		fasthttp.ReleaseRequest(x.up)
		x.up = nil
	}
	if x.begun {
		x.path.flights.remove(x)
		x.life.end(nil)
	}
	x.path.admission.Release(x.ticket)
	if x.keptBody {
		edge.GiveBody(x.bodyBuf)
		x.bodyBuf, x.body = nil, nil
	}
	status, errType := e.status, e.errType
	switch {
	case x.gone.Load():
		status, errType = statusClientGone, "client_disconnected"
	case e.cut:
		errType = "stream_cut"
	case errType == "" && status >= 400:
		errType = workerErrorType(status)
	}
	x.route.Tokens, x.route.Usage = e.tokens, e.usage
	x.path.rec.record(x, status, errType)
	x.path.hooks.finished(x, status, e.cut)
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

// hopHeaders are connection-level headers that never cross the proxy.
// Expect is among them: the router has the whole body before any worker is
// chosen.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

// upstreamHeaders is what of a client's headers its workers are sent:
// the client's, less the hop-by-hop ones, the client's key when the API
// takes keys and the trace context of a traced request, with the request's
// id and the workers' own key.
type upstreamHeaders struct {
	traced bool           // each attempt sends a traceparent of its own
	keys   *identity.Keys // the API's keys (the door's)
	bearer string         // "Bearer " + Config.APIKey; "" when none
}

func newUpstreamHeaders(traced bool, keys *identity.Keys, apiKey string) upstreamHeaders {
	u := upstreamHeaders{traced: traced, keys: keys}
	if apiKey != "" {
		u.bearer = "Bearer " + apiKey
	}
	return u
}

// request is the request x's attempts send, but for the worker's host and
// path and the body.
func (u upstreamHeaders) request(x *exchange) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	h := &req.Header
	x.ctx.Request.Header.CopyTo(h)
	delRequestHopHeaders(h, x.ctx.Request.Header.RawHeaders())
	if u.traced {
		h.Del("traceparent") // each attempt sends its own
		h.Del("tracestate")
	}
	h.SetBytesV("x-request-id", x.id)
	if u.keys.Enabled() {
		// the client's key is the router's, not the workers', in either form
		h.Del(fasthttp.HeaderAuthorization)
		h.Del(credential.APIKeyHeader)
	}
	if u.bearer != "" && len(h.Peek("Authorization")) == 0 {
		h.Set("Authorization", u.bearer)
	}
	return req
}

// delRequestHopHeaders deletes the hop-by-hop headers of a client's
// request, those that raw, the headers as the client sent them, names, and
// those its Connection header names (RFC 9110 7.6.1). Connection always
// goes: fasthttp may imply it (an HTTP/1.0 request).
func delRequestHopHeaders(h *fasthttp.RequestHeader, raw []byte) {
	var present [16]bool
	present[0] = true // Connection
	for len(raw) > 0 {
		line := raw
		if n := bytes.IndexByte(raw, '\n'); n >= 0 {
			line, raw = raw[:n], raw[n+1:]
		} else {
			raw = nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		for i, hop := range hopHeaders {
			if bytes.EqualFold(name, []byte(hop)) {
				present[i] = true
			}
		}
		if bytes.EqualFold(name, []byte("Connection")) {
			eachConnectionOption(value, h.DelBytes)
		}
	}
	delPresent(h.Del, present)
}

// eachConnectionOption calls del with each header name a Connection
// header's value lists: those headers are for the hop they came on only.
func eachConnectionOption(value []byte, del func([]byte)) {
	for len(value) > 0 {
		var opt []byte
		opt, value, _ = bytes.Cut(value, []byte(","))
		if opt = bytes.TrimSpace(opt); len(opt) > 0 && !bytes.EqualFold(opt, []byte("close")) &&
			!bytes.EqualFold(opt, []byte("keep-alive")) {
			del(opt)
		}
	}
}

// upstreamRequest readies x's request for an attempt on worker m.
func (x *exchange) upstreamRequest(m *member) *fasthttp.Request {
	req := x.up
	req.Header.SetHost(m.addr)
	if path := m.base.BasePath(); path == "" {
		req.Header.SetRequestURIBytes(x.uri)
	} else {
		req.Header.SetRequestURI(path + string(x.uri))
	}
	return req
}
