package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/proxy/admit"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
	"github.com/kvrouter/kvrouter/proxy/edge"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/identity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
	"github.com/kvrouter/kvrouter/proxy/refusals"
)

// The door is what every request outside the admin API passes before its
// route serves it, in this order, and nowhere else:
//
//  1. key: 401 without the credential its route needs (access);
//  2. size and headers: 413 for a Content-Length over --max-payload-size;
//  3. admission: 429 (or 408 after queueing) on the routes that take a token;
//  4. body: read as it arrives, charged to --max-buffered-body-bytes for
//     what arrived, fairly between clients (package bodyintake): 503
//     with Retry-After when it has no room to grow,
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
type door struct {
	keys       *identity.Keys     // shared with the upstream headers, which drop the client's key
	admin      AdminCredential    // nil: no admin token
	bodies     *bodyintake.Budget // the request bodies held at once
	admission  *admit.Admitter
	refusals   *refusals.Log // every refusal, counted and logged
	metrics    *pathmetrics.Metrics
	maxPayload int
	edge       Edge
	pooled     bool            // bodies may be read into pooled buffers (not with P/D, whose prefill outlives the request)
	life       context.Context // the replica's: admission's waits end with it
	// finishRefused ends a refused request of a metered route as an
	// exchange, which releases tk and counts it as the routes' requests are.
	finishRefused func(ctx *fasthttp.RequestCtx, rt *apiRoute, since time.Time, tk *admission.Ticket, err error)
}

// pass runs ctx's request through the door: what it holds when it
// passed, or false when it was turned away (and answered).
func (d *door) pass(ctx *fasthttp.RequestCtx, rt *apiRoute) (passed, bool) {
	who := d.keys.CallerOf(&ctx.Request.Header)
	tk, err := d.admitted(ctx, rt, &who)
	if err != nil {
		d.turnAway(ctx, rt, err, nil, ctx.Time())
		return passed{}, false
	}
	client := identity.ClientOf(&who, ctx.RemoteIP())
	held, buf, err := d.readBody(ctx, client, tk)
	if err != nil {
		d.turnAway(ctx, rt, err, tk, ctx.Time())
		return passed{}, false
	}
	if d.admission.StampsPriority() {
		stampPriority(ctx, tk)
	}
	return passed{held: held, client: client, buf: buf, ticket: tk, caller: who}, true
}

// passed is what a request that went through the door holds.
type passed struct {
	held   int64             // its body's share of the budget
	client bodyintake.Client // who it is charged to of bodies held
	buf    *[]byte           // the pooled buffer its body was read into; nil when none
	ticket *admission.Ticket // its admission slot; nil on routes that take none
	caller identity.Caller   // who it says it is
}

// served gives back what the request held once it was served: its share of
// the budget and its body's buffer, which the request no longer names, but
// when its exchange kept the body (keptBody: a stream that may resume,
// whose finish gives the buffer back).
func (d *door) served(ctx *fasthttp.RequestCtx, pass passed, keptBody bool) {
	d.bodies.Give(pass.client, pass.held)
	if pass.buf != nil {
		ctx.Request.SetBodyRaw(nil)
		if !keptBody {
			edge.GiveBody(pass.buf)
		}
	}
}

// admitted runs the door's steps that read no body: key, size, admission.
func (d *door) admitted(ctx *fasthttp.RequestCtx, rt *apiRoute, who *identity.Caller) (*admission.Ticket, error) {
	if err := d.headersAllow(ctx, rt, who); err != nil {
		return nil, err
	}
	if rt.admits {
		return d.admission.Admit(d.life, ctx, who)
	}
	return nil, nil
}

// headersAllow runs the steps decided on the headers: the key, then the
// announced size. The Expect: 100-continue handler runs them too.
func (d *door) headersAllow(ctx *fasthttp.RequestCtx, rt *apiRoute, who *identity.Caller) error {
	if !d.mayUse(who, rt.access) {
		if who.Ambiguous && d.keys.Enabled() {
			return errAmbiguousKey
		}
		return errUnauthorized
	}
	if ctx.Request.Header.ContentLength() > d.maxPayload {
		return tooLarge(d.maxPayload)
	}
	return nil
}

// turnAway answers a request the door refused, and ends it: a request of a
// metered route is an exchange from its arrival, since, and ends in finish,
// which releases tk, the admission a request whose body was refused holds.
// What the client may still be sending is drained, on a connection that
// then closes, so that it reads the answer rather than a reset.
func (d *door) turnAway(ctx *fasthttp.RequestCtx, rt *apiRoute, err error, tk *admission.Ticket, since time.Time) {
	if bodyLeft(ctx) {
		if ec := edge.Of(ctx.Conn()); ec != nil {
			ec.LingerOnClose()
		}
		ctx.SetConnectionClose()
	}
	switch {
	case errors.Is(err, failure.ErrNoKey):
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="kvrouter"`)
	case errors.Is(err, failure.ErrBodiesHeld):
		ctx.Response.Header.Set("Retry-After", "1")
	}
	failure.Write(ctx, err)
	if failure.IsGone(err) { // it left while queued: it gets nothing, the metrics a 499
		ctx.SetConnectionClose()
		ctx.Response.ResetBody()
		ctx.SetStatusCode(statusClientGone)
		d.metrics.Disconnects.Inc()
	}
	d.refusals.Refused(ctx, rt.name, ctx.Response.StatusCode(), failure.Type(err), rt.metered == nil)
	if rt.metered != nil {
		d.finishRefused(ctx, rt, since, tk, err)
	}
}

// AdminCredential is the admin API's token, as /metrics takes it in place
// of an API key.
type AdminCredential interface {
	// HasToken reports whether the admin API has a token (--admin-token).
	HasToken() bool
	// IsToken reports whether a credential (as package credential reads
	// it) is that token.
	IsToken(token []byte) bool
}

// mayUse reports whether a request of caller c carries what a route of
// this access needs.
func (d *door) mayUse(c *identity.Caller, a access) bool {
	switch a {
	case open:
		return true
	case keyedOrAdmin:
		admin := d.admin
		if admin != nil && admin.HasToken() && c.Token != nil && admin.IsToken(c.Token) {
			return true
		}
		if !d.keys.Enabled() {
			return admin == nil || !admin.HasToken()
		}
	}
	return !d.keys.Enabled() || c.Verified
}

// tooLarge is the refusal of a body over max bytes.
func tooLarge(max int) error {
	return failure.Errorf(failure.ErrTooLarge, "request body exceeds the limit of %d bytes", max)
}

// bodyLeft reports whether some of the request's body may still be unread.
func bodyLeft(ctx *fasthttp.RequestCtx) bool {
	return ctx.RequestBodyStream() != nil && ctx.Request.Header.ContentLength() != 0
}

// readBody reads the request's body (package bodyintake), charged to the
// budget of bodies held as it arrives, and makes it the request's body
// (PostBody). held is its share of the budget, buf the pooled buffer it
// was read into (edge.TakeBody), nil when it has none. A body of no length
// (chunked) is charged to its admission for what it turned out to be.
func (d *door) readBody(ctx *fasthttp.RequestCtx, client bodyintake.Client, tk *admission.Ticket) (held int64, buf *[]byte, err error) {
	stream := ctx.RequestBodyStream()
	n := ctx.Request.Header.ContentLength()
	if stream == nil || n == 0 {
		return 0, nil, nil
	}
	in := d.bodies.Start(ctx, stream, client, n, d.bodyLimits())
	defer in.Release()
	err = in.Read()
	held = in.Held()
	if err != nil {
		d.bodies.Give(client, held)
		edge.GiveBody(in.Buf())
		return 0, nil, err
	}
	if n < 0 {
		d.admission.Recost(tk, len(in.Body()))
	}
	ctx.Request.SetBodyRaw(in.Body())
	return held, in.Buf(), nil
}

// bodyLimits bound the reading of a body, from the edge's settings.
func (d *door) bodyLimits() bodyintake.Limits {
	e := d.edge
	return bodyintake.Limits{Max: d.maxPayload, Pooled: d.pooled, MinRate: float64(max(e.MinBodyRate, 0)),
		Grace: max(e.BodyRateGrace, 0), Timeout: e.BodyReadTimeout}
}

var (
	// errUnauthorized: a request without the credential its route needs.
	errUnauthorized = failure.Errorf(failure.ErrNoKey, "missing or invalid API key: send Authorization: Bearer <key>, or x-api-key: <key>")
	// errAmbiguousKey: two different keys, one in each header.
	errAmbiguousKey = failure.Errorf(failure.ErrNoKey, "two different API keys, in Authorization and in x-api-key: send one")
)
