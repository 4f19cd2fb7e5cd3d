package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/exposition"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// access says who may use a route. Every route of the table names one, and
// the door checks it before anything else of the request is read.
type access int

const (
	// keyed routes need one of --api-keys when keys are set.
	keyed access = iota
	// keyedOrAdmin routes (/metrics) need an API key or the admin token
	// when either is set: the metrics name every worker's URL.
	keyedOrAdmin
	// open routes answer anyone: the probes of load balancers and
	// orchestrators, which carry no key. Nothing else may be open.
	open
)

// apiRoute is one entry of the table that every request outside the admin API
// is dispatched by.
type apiRoute struct {
	name   string // what it serves
	sample string // a request it serves, "METHOD /path", for the route-table test
	match  func(method, path []byte) bool
	access access
	admits bool // takes an admission token (429 or 408) before its body is read
	// metered names the endpoint a request of the route counts under, and
	// makes each one an exchange (exchange.go): refused at the door or
	// served by plan, it ends in finish, with its line in the request log
	// and its span. Every route that admits is metered.
	metered func(path []byte) *wire.Endpoint
	plan    plan
	// serve answers a request of a route that is not metered.
	serve func(p *Proxy, ctx *fasthttp.RequestCtx)
}

// routes is the table. A route is added here or nowhere: the door gives a
// request no other way in.
var routes = append(inferenceRoutes(), []*apiRoute{
	{name: "/v1/responses/{id}", sample: "GET /v1/responses/resp_1",
		match:  func(_, path []byte) bool { _, ok := wire.StoredResponseID(path); return ok },
		access: keyed, admits: true, metered: func([]byte) *wire.Endpoint { return wire.StoredResponses }, plan: (*exchange).planStored},
	{name: "/v1/models", sample: "GET /v1/models", match: pathIs("/v1/models"), access: keyed, serve: (*Proxy).serveModels},
	workerInfoRoute("/get_model_info"),
	workerInfoRoute("/get_server_info"),
	workerInfoRoute("/health_generate"),
	{name: "/health", sample: "GET /health", match: pathIs("/health"), access: open, serve: serveAlive},
	{name: "/liveness", sample: "GET /liveness", match: pathIs("/liveness"), access: open, serve: serveAlive},
	{name: "/readiness", sample: "GET /readiness", match: pathIs("/readiness"), access: open, serve: (*Proxy).serveReadiness},
	{name: "/metrics", sample: "GET /metrics", match: pathIs("/metrics"), access: keyedOrAdmin, serve: (*Proxy).serveMetrics},
}...)

// inferenceRoutes are the POSTs of the inference endpoints, one route each.
// A count of a prompt's tokens takes no admission token (planCountTokens
// says why).
func inferenceRoutes() []*apiRoute {
	var rs []*apiRoute
	for _, ep := range wire.Endpoints {
		if ep.Kind == wire.KindNone {
			continue
		}
		rt := &apiRoute{name: "POST " + ep.Path, sample: "POST " + ep.Path,
			match:  func(m, path []byte) bool { return string(m) == fasthttp.MethodPost && string(path) == ep.Path },
			access: keyed, admits: true, metered: func([]byte) *wire.Endpoint { return ep }, plan: (*exchange).planInference}
		if ep.Counts {
			rt.admits, rt.plan = false, (*exchange).planCountTokens
		}
		rs = append(rs, rt)
	}
	return rs
}

// workerInfoRoute is a request about the engine, sent to any worker.
func workerInfoRoute(path string) *apiRoute {
	return &apiRoute{name: path, sample: "GET " + path, match: pathIs(path), access: keyed, admits: true,
		metered: func([]byte) *wire.Endpoint { return wire.WorkerInfo }, plan: (*exchange).planAnyWorker}
}

// noRoute answers what the table does not hold, behind the key like any
// route: a stranger learns nothing of the API from its 404s.
var noRoute = &apiRoute{name: "no route", access: keyed, serve: func(p *Proxy, ctx *fasthttp.RequestCtx) {
	failure.WriteStatus(ctx, fasthttp.StatusNotFound, "invalid_request_error",
		"no route for "+string(ctx.Method())+" "+string(ctx.Path()))
}}

// routeOf returns the route of ctx's request.
func routeOf(ctx *fasthttp.RequestCtx) *apiRoute {
	method, path := ctx.Method(), ctx.Path()
	for _, rt := range routes {
		if rt.match(method, path) {
			return rt
		}
	}
	return noRoute
}

func pathIs(want string) func(_, path []byte) bool {
	return func(_, path []byte) bool { return string(path) == want }
}

func serveAlive(_ *Proxy, ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok"}`)
}

func (p *Proxy) serveMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4")
	exposition.Write(ctx, p.deps.Metrics)
}
