package proxy

import (
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/admission"
)

// The door is what every request outside the admin API passes before its
// route serves it, in this order, and nowhere else:
//
//  1. key: 401 without the credential its route needs (access);
//  2. size and headers: 413 for a Content-Length over --max-payload-size;
//  3. admission: 429 (or 408 after queueing) on the routes that take a token;
//  4. body: read as it arrives, charged to --max-buffered-body-bytes for
//     what arrived (bodyintake.go), fairly between clients
//     (bodybudget.go): 503 with Retry-After when it has no room to grow,
//     408 when it arrives too slowly or too late, 413 for a body without
//     a length (chunked) past --max-payload-size.
//
// The server streams request bodies (StreamRequestBody), so steps 1 to 3
// are decided on the headers alone: a refused request costs the router its
// headers, not its body (the connection then drains what the client still
// sends, and closes).
//
// What passed is the body's share of the budget, which the caller gives
// back once the request was served, and its admission ticket, whose slot it
// releases.
func (p *Proxy) door(ctx *fasthttp.RequestCtx, rt *apiRoute) (passed, bool) {
	who := p.callerOf(ctx)
	tk, err := p.admitted(ctx, rt, &who)
	if err != nil {
		p.turnAway(ctx, rt, err, nil, ctx.Time())
		return passed{}, false
	}
	client := clientOf(&who, ctx)
	held, buf, err := p.readBody(ctx, client, tk)
	if err != nil {
		p.turnAway(ctx, rt, err, tk, ctx.Time())
		return passed{}, false
	}
	p.admission.stampPriority(ctx, tk)
	return passed{held: held, client: client, buf: buf, ticket: tk, caller: who}, true
}

// passed is what a request that went through the door holds.
type passed struct {
	held   int64             // its body's share of the budget
	client bodyClient        // who it is charged to of bodies held
	buf    *[]byte           // the pooled buffer its body was read into; nil when none
	ticket *admission.Ticket // its admission slot; nil on routes that take none
	caller caller            // who it says it is
}

// served gives back what the request held once it was served: its share of
// the budget and its body's buffer, which the request no longer names.
func (p *Proxy) served(ctx *fasthttp.RequestCtx, pass passed) {
	p.bodies.give(pass.client, pass.held)
	if pass.buf != nil {
		ctx.Request.SetBodyRaw(nil)
		giveBody(pass.buf)
	}
}

// admitted runs the door's steps that read no body: key, size, admission.
func (p *Proxy) admitted(ctx *fasthttp.RequestCtx, rt *apiRoute, who *caller) (*admission.Ticket, error) {
	if err := p.headersAllow(ctx, rt, who); err != nil {
		return nil, err
	}
	if rt.admits {
		return p.admission.admit(p.ctx, ctx, who)
	}
	return nil, nil
}

// headersAllow runs the steps decided on the headers: the key, then the
// announced size. The Expect: 100-continue handler runs them too.
func (p *Proxy) headersAllow(ctx *fasthttp.RequestCtx, rt *apiRoute, who *caller) error {
	if !p.mayUse(who, rt.access) {
		if who.ambiguous && p.keys.enabled() {
			return errAmbiguousKey
		}
		return errUnauthorized
	}
	if ctx.Request.Header.ContentLength() > p.cfg.MaxPayloadSize {
		return p.tooLarge()
	}
	return nil
}

// turnAway answers a request the door refused, and ends it: a request of a
// metered route is an exchange from its arrival, since, and ends in finish,
// which releases tk, the admission a request whose body was refused holds.
// What the client may still be sending is drained, on a connection that
// then closes, so that it reads the answer rather than a reset.
func (p *Proxy) turnAway(ctx *fasthttp.RequestCtx, rt *apiRoute, err error, tk *admission.Ticket, since time.Time) {
	if bodyLeft(ctx) {
		if ec := edgeOf(ctx.Conn()); ec != nil {
			ec.lingerOnClose()
		}
		ctx.SetConnectionClose()
	}
	switch {
	case errors.Is(err, errNoKey):
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="kvrouter"`)
	case errors.Is(err, errBodiesHeld):
		ctx.Response.Header.Set("Retry-After", "1")
	}
	writeError(ctx, err)
	if isGone(err) { // it left while queued: it gets nothing, the metrics a 499
		ctx.SetConnectionClose()
		ctx.Response.ResetBody()
		ctx.SetStatusCode(statusClientGone)
		p.metrics.disconnects.Inc()
	}
	p.refusals.refused(ctx, rt.name, ctx.Response.StatusCode(), errorType(err), rt.metered == nil)
	if rt.metered != nil {
		x := p.newExchange(ctx, rt.metered(ctx.Path()), since, tk)
		x.finish(ending{status: ctx.Response.StatusCode(), errType: errorType(err)})
	}
}

// bodyLeft reports whether some of the request's body may still be unread.
func bodyLeft(ctx *fasthttp.RequestCtx) bool {
	return ctx.RequestBodyStream() != nil && ctx.Request.Header.ContentLength() != 0
}

// readBody reads the request's body (bodyintake.go), charged to the
// budget of bodies held as it arrives, and makes it the request's body
// (PostBody). held is its share of the budget, buf the pooled buffer it
// was read into (bodypool.go), nil when it has none. A body of no length
// (chunked) is charged to its admission for what it turned out to be.
func (p *Proxy) readBody(ctx *fasthttp.RequestCtx, client bodyClient, tk *admission.Ticket) (held int64, buf *[]byte, err error) {
	stream := ctx.RequestBodyStream()
	n := ctx.Request.Header.ContentLength()
	if stream == nil || n == 0 {
		return 0, nil, nil
	}
	in := p.intake(ctx, stream, client, n)
	defer releaseIntake(in)
	err = in.read()
	held = int64(in.size)
	if err != nil {
		p.bodies.give(in.client, held)
		giveBody(in.buf)
		return 0, nil, err
	}
	if n < 0 {
		p.admission.recost(tk, len(in.body))
	}
	ctx.Request.SetBodyRaw(in.body)
	return held, in.buf, nil
}

// intake is the reading of ctx's body, announced at n bytes (-1: none),
// for client.
func (p *Proxy) intake(ctx *fasthttp.RequestCtx, stream io.Reader, client bodyClient, n int) *intake {
	e := p.cfg.Edge
	in := intakes.Get().(*intake)
	in.stream, in.ctx, in.budget, in.client, in.want, in.max = stream, ctx, p.bodies, client, n, p.cfg.MaxPayloadSize
	in.pooled, in.rate, in.grace = p.pd == nil, float64(max(e.MinBodyRate, 0)), max(e.BodyRateGrace, 0)
	in.start, in.end = time.Now(), ctx.Time().Add(e.BodyReadTimeout)
	return in
}

var (
	// errUnauthorized: a request without the credential its route needs.
	errUnauthorized = errorf(errNoKey, "missing or invalid API key: send Authorization: Bearer <key>, or x-api-key: <key>")
	errNoKey        = errors.New("unauthorized")
	// errAmbiguousKey: two different keys, one in each header.
	errAmbiguousKey = errorf(errNoKey, "two different API keys, in Authorization and in x-api-key: send one")
	// errBodiesHeld: the budget of request bodies is spent.
	errBodiesHeld = errors.New("too many request bytes held")
	// errBodyTimeout: the body did not arrive within --body-read-timeout-secs,
	// or fell behind --min-body-rate.
	errBodyTimeout = errors.New("request body timed out")
)
