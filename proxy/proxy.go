package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/proxy/bodyintake"
	"github.com/kvrouter/kvrouter/proxy/edge"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/identity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
	"github.com/kvrouter/kvrouter/proxy/refusals"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// Deps are what a Proxy is built from.
type Deps struct {
	Loads   *affinity.LoadTable
	Index   *affinity.Index
	Router  *affinity.Router // for regular (not disaggregated) workers
	Health  Health           // nil: every worker is eligible, nothing tracked
	Metrics *metrics.Set
	Logger  *slog.Logger
	// Admin handles the admin API; it returns false for other paths.
	Admin func(*fasthttp.RequestCtx) bool
	// RegistryLoaded reports whether the registry was read at least once.
	RegistryLoaded func() bool
	// Ready, when set, is closed once the registry is loaded and its workers
	// probed; inference requests that come before wait for it (at most
	// maxReadyWait) instead of meeting an empty fleet.
	Ready <-chan struct{}
	// Tracer, when set, gets a span per inference request and per upstream
	// attempt (see package tracing); nil traces nothing.
	Tracer trace.Tracer
	// PD, when set, disaggregates prefill and decode; Router then goes
	// unused for inference.
	PD *PD
	// AdminToken, when set, is the admin API's token, which /metrics takes
	// as well as an API key.
	AdminToken AdminCredential
	// Dialer makes every connection to a worker (inference, discovery,
	// stored-response lookups, fan-outs); nil is one with Config's
	// WorkerHosts. The replica gives the proxy and health the same one.
	Dialer *workerurl.Dialer
	// Decider, when set, decides every leg and judges it by the engine's
	// answer (the replica core); nil: the routers decide alone.
	Decider Decider
	// Engines, when set, appends the latest reading of every worker's
	// engine (requests running and waiting, KV cache usage): the
	// saturation signal admission bounds the requests in flight by. nil:
	// no such bound.
	Engines func([]admission.Reading) []admission.Reading
	// OwnerSecrets, when set, returns the secrets the tier shares (the
	// gossip keyring, the primary first): a stored response's owner is
	// sealed with the first and checked against all (ownerseal.go). nil,
	// or none returned: a secret of this replica's own, and a response is
	// found only through the replica that relayed it.
	OwnerSecrets func() [][]byte
	// Tokens, when set, is the tier's keepers of the prompts' tokens
	// (tokenize_share.go); nil: this replica's are its own.
	Tokens TokenShare
}

// Proxy serves the inference API of one replica: it owns the server, its
// listeners and the door, and hands every request the door lets in to an
// exchange, served by the collaborators of its request path (path.go).
type Proxy struct {
	cfg      Config
	deps     Deps
	fleet    *Fleet
	log      *slog.Logger
	path     *requestPath // what every exchange is served with
	server   *fasthttp.Server
	edgesMu  sync.Mutex
	edges    []*edge.Listener
	door     *door         // what every request passes before its route serves it
	refusals *refusals.Log // every refusal, counted and logged
	cert     *serverCert   // nil: the client listener speaks plain HTTP
	tokens   *tokenizer    // nil unless Config.Tokenize.Enabled; its background asks end at Shutdown
	calls    *workerCalls
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New builds a proxy. Call Fleet().SetWorkers to give it workers.
func New(cfg Config, deps Deps) (*Proxy, error) {
	cfg = withDefaults(cfg)
	deps, err := deps.complete(cfg)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, deps: deps, log: deps.Logger, refusals: refusals.New(deps.Metrics, deps.Logger)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.TLSCertPath != "" || cfg.TLSKeyPath != "" {
		if p.cert, err = newServerCert(cfg.TLSCertPath, cfg.TLSKeyPath); err != nil {
			return nil, err
		}
	}
	m := pathmetrics.New(deps.Metrics, knownErrors())
	p.fleet = newWorkerFleet(cfg, deps, m, p.log, func(id affinity.WorkerID) { p.MoveStreams(id) })
	p.calls = &workerCalls{fleet: p.fleet, apiKey: cfg.APIKey, timeout: cfg.DialTimeout}
	if cfg.Tokenize.Enabled {
		p.tokens = newTokenizer(cfg.Tokenize, cfg.APIKey, p.fleet, deps.Tokens, deps.Index, deps.Metrics)
	}
	keys := &identity.Keys{}
	keys.Replace(cfg.APIKeys)
	if p.path, err = newRequestPath(p, m, keys); err != nil {
		return nil, err
	}
	p.door = newDoor(p, keys)
	p.server = newServer(p)
	discovery := newDiscovery(cfg.BlockSize, cfg.LoRA.ModelRefresh, p.fleet, p.calls, deps.Index, p.log)
	for _, run := range []func(context.Context){discovery.run, p.path.admission.Run, p.path.watcher.run} {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			run(p.ctx)
		}()
	}
	return p, nil
}

// complete checks what a Proxy cannot do without and fills in the
// defaults of the rest.
func (d Deps) complete(cfg Config) (Deps, error) {
	if d.Loads == nil || d.Router == nil || d.Metrics == nil {
		return d, errors.New("proxy: Loads, Router and Metrics are required")
	}
	if d.PD != nil && (d.PD.Prefill == nil || d.PD.Decode == nil || (d.PD.Mode != PDVLLM && d.PD.Mode != PDSGLang)) {
		return d, errors.New("proxy: disaggregation needs a mode and a prefill and a decode router")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Health == nil {
		d.Health = allHealthy{}
	}
	if d.Dialer == nil {
		d.Dialer = &workerurl.Dialer{Policy: cfg.WorkerHosts}
	}
	return d, nil
}

// newWorkerFleet is the proxy's view of the workers: a worker that leaves
// the registry takes its blocks out of the index and has its streams moved
// off it by moveStreams (the engine may be going away with it; a stream
// that cannot resume finishes where it is), and every change is written to
// the per-worker metrics.
func newWorkerFleet(cfg Config, deps Deps, m *pathmetrics.Metrics, log *slog.Logger, moveStreams func(affinity.WorkerID)) *Fleet {
	onRemove := func(id affinity.WorkerID) {
		if deps.Index != nil {
			deps.Index.RemoveWorker(id)
		}
		moveStreams(id)
	}
	f := newFleet(deps.Loads, deps.Health.Eligible, onRemove, cfg.DialTimeout, cfg.WorkerHosts, deps.Dialer, log)
	f.idleTimeout = cfg.WorkerIdleTimeout
	f.refreshModels = cfg.LoRA.ModelRefresh > 0
	f.onPublish = func(v *view) { m.SyncWorkers(v.labels(), deps.Loads, deps.Health.Eligible) }
	policies := slices.Sorted(slices.Values(affinity.PolicyNames)) // all: SetRouters may switch to any
	f.counters = func(w Worker) *pathmetrics.WorkerCounters { return m.ForWorker(w.URL, policies) }
	deps.Metrics.NewGauge("vllm_router_active_workers", func() float64 { return float64(f.view().eligible) })
	if deps.Index != nil {
		deps.Metrics.NewGauge("vllm_router_index_blocks", func() float64 { return float64(deps.Index.TotalBlocks()) })
		deps.Metrics.NewGauge("vllm_router_index_workers", func() float64 { return float64(deps.Index.Workers()) })
	}
	return f
}

// newServer is the fasthttp server of p's clients.
func newServer(p *Proxy) *fasthttp.Server {
	edge := p.cfg.Edge
	return &fasthttp.Server{
		Handler:            p.Handler,
		Name:               "kvrouter",
		MaxRequestBodySize: p.cfg.MaxPayloadSize,
		// Bodies are read by the door (door.go), once the headers let them
		// in, and bounded there.
		StreamRequestBody: true,
		ReadBufferSize:    edge.MaxHeaderSize,
		ReadTimeout:       edge.HeaderReadTimeout, // then BodyReadTimeout, from the end of the headers
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			// With a limit of one byte the server reads no more than the
			// first byte of a body before the handler runs (it would
			// otherwise read up to 8 KiB first); the door reads the rest,
			// once the headers let it in.
			return fasthttp.RequestConfig{ReadTimeout: edge.BodyReadTimeout, MaxRequestBodySize: 1}
		},
		WriteTimeout:          edge.WriteTimeout, // a stream renews it before each chunk
		IdleTimeout:           edge.IdleTimeout,
		ErrorHandler:          p.serverError,
		ExpectHandler:         p.expect,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true, // never log or echo request bytes (Authorization among them)
		Logger:                fasthttpLogger{p.log},
	}
}

// newDoor builds the door of p's requests, with the API's keys, once p's
// request path is built.
func newDoor(p *Proxy, keys *identity.Keys) *door {
	path := p.path
	d := &door{keys: keys, admin: p.deps.AdminToken, admission: path.admission, refusals: p.refusals,
		metrics: path.rec.metrics, maxPayload: p.cfg.MaxPayloadSize, edge: p.cfg.Edge, pooled: p.deps.PD == nil, life: p.ctx,
		bodies: bodyintake.NewBudget(p.cfg.Edge.MaxBufferedBodyBytes, p.cfg.Edge.MaxBodyShare)}
	p.deps.Metrics.NewGauge("vllm_router_request_body_bytes_held", func() float64 { return float64(d.bodies.Held()) })
	d.finishRefused = func(ctx *fasthttp.RequestCtx, rt *apiRoute, since time.Time, tk *admission.Ticket, err error) {
		x := newExchange(path, ctx, rt.metered(ctx.Path()), since, tk)
		x.finish(ending{status: ctx.Response.StatusCode(), errType: failure.Type(err)})
	}
	return d
}

// Fleet returns the proxy's view of the workers.
func (p *Proxy) Fleet() *Fleet { return p.fleet }

// Door is the replica's admission door, whose queue reports the tier's
// gossip carries (core.Door.LocalQueues, RemoteQueues).
func (p *Proxy) Door() *core.Door { return p.path.admission.Door() }

// AdmissionStats is the door's queue, for /ui.
func (p *Proxy) AdmissionStats() admission.Stats { return p.path.admission.Door().Scheduler().Stats() }

// ReloadTLS rereads the client listener's certificate and key; connections
// already open keep theirs. It does nothing without TLS.
func (p *Proxy) ReloadTLS() error {
	if p.cert == nil {
		return nil
	}
	return p.cert.reload()
}

// SetRouters replaces the routers of the request path in one step (a
// routing change the cluster replicated): requests routed from now on use
// the new ones, attempts already under way finish with theirs. The mode
// (disaggregated or not) cannot change: pd must be set exactly when the
// proxy was built with Deps.PD, in the same Mode. Safe for concurrent use.
func (p *Proxy) SetRouters(regular *affinity.Router, pd *PD) error {
	return p.path.legs.setRouters(regular, pd)
}

// DecidingRouter is the router whose decisions the Decider makes: the
// prefill one under disaggregation, else the regular one.
func (p *Proxy) DecidingRouter() *affinity.Router { return p.path.legs.decidingRouter() }

// MoveStreams marks the streams of this replica on worker w to move, at
// their next chunk boundary, to other workers; it returns how many it
// marked. A stream that cannot resume stays on w.
func (p *Proxy) MoveStreams(w affinity.WorkerID) int { return p.path.flights.moveStreamsOff(w) }

// StreamsOn counts the exchanges of this replica whose current attempt is
// on worker w.
func (p *Proxy) StreamsOn(w affinity.WorkerID) int { return p.path.flights.streamsOn(w) }

// FindTokens answers a peer's TokenShare.Find: the tokens this replica
// keeps of the longest prompt the query's marks name, or nothing (an empty
// answer, also when it routes on no engine's events).
func (p *Proxy) FindTokens(query []byte) ([]byte, error) { return p.tokens.findForPeer(query) }

// KeepTokens keeps a peer's TokenShare.Keep, in the token cache's bounds.
func (p *Proxy) KeepTokens(entry []byte) error { return p.tokens.keepForPeer(entry) }

// SetAPIKeys replaces the keys clients must present (on SIGHUP, say); none
// turns the check off.
func (p *Proxy) SetAPIKeys(keys []string) { p.door.keys.Replace(keys) }

// Serve answers connections from ln until Shutdown.
func (p *Proxy) Serve(ln net.Listener) error {
	el := edge.NewListener(ln, p.cfg.Edge.MaxConnections, p.log)
	p.edgesMu.Lock()
	p.edges = append(p.edges, el)
	p.edgesMu.Unlock()
	var served net.Listener = el
	if p.cert != nil {
		served = edge.TLSListener{Listener: tls.NewListener(el, p.cert.config())}
	} else {
		el.WatchHeads = true
	}
	return p.server.Serve(served)
}

// accepting reports whether every listener takes new connections.
func (p *Proxy) accepting() bool {
	p.edgesMu.Lock()
	defer p.edgesMu.Unlock()
	for _, el := range p.edges {
		if !el.Accepting() {
			return false
		}
	}
	return true
}

// Shutdown stops accepting, ends open connections and waits for background
// work of the proxy.
func (p *Proxy) Shutdown(ctx context.Context) error {
	err := p.server.ShutdownWithContext(ctx)
	p.path.flights.abortAll(context.Canceled) // what outlived the shutdown's wait
	p.cancel()
	p.wg.Wait()
	p.edgesMu.Lock()
	for _, el := range p.edges {
		el.StopLingering()
	}
	p.edgesMu.Unlock()
	p.tokens.close() // its background asks use the fleet's pools
	p.fleet.close()
	return err
}

// Handler routes one request: the admin API's (which checks its own
// token), a CORS preflight, or one of the table's routes through the door.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	if ec := edge.Of(ctx.Conn()); ec != nil && ec.OverLimit() {
		p.refuseConnection(ctx, ec)
		return
	}
	path := ctx.Path()
	ep := wire.EndpointAt(path)
	// The admin API owns no inference path: an inference request does not
	// go through its route table.
	if ep == nil && p.deps.Admin != nil && p.deps.Admin(ctx) {
		return
	}
	if p.path.cors.apply(ctx, true) {
		return
	}
	rt := routeOf(ctx)
	pass, ok := p.door.pass(ctx, rt)
	if !ok {
		return
	}
	keptBody := false
	defer func() { p.door.served(ctx, pass, keptBody) }()
	if rt.metered == nil {
		rt.serve(p, ctx)
		return
	}
	x := newExchange(p.path, ctx, rt.metered(ctx.Path()), time.Now(), pass.ticket)
	x.caller, x.bodyBuf = pass.caller, pass.buf
	x.serve(rt.plan)
	// A stream that may resume keeps its body to write the continuation
	// with, past the handler's end: its finish, which comes later (fasthttp
	// writes a streamed body once the handler returned), gives it back.
	keptBody = x.keptBody
}

// refuseConnection answers every request of a connection accepted past
// --max-connections with 503, and closes it.
func (p *Proxy) refuseConnection(ctx *fasthttp.RequestCtx, ec *edge.Conn) {
	ec.LingerOnClose()
	ctx.SetConnectionClose()
	failure.WriteStatus(ctx, fasthttp.StatusServiceUnavailable, "service_unavailable",
		fmt.Sprintf("the router is at its limit of %d connections", p.cfg.Edge.MaxConnections))
	p.refusals.Refused(ctx, refusals.Connection, fasthttp.StatusServiceUnavailable, "max_connections", true)
}

// CutOffReporter is a Health that can tell when this replica, not its
// workers, is cut off (it hears no peer and no worker); readiness then says
// so.
type CutOffReporter interface {
	CutOff() bool
}

func (p *Proxy) serveReadiness(ctx *fasthttp.RequestCtx) {
	loaded := p.deps.RegistryLoaded == nil || p.deps.RegistryLoaded()
	accepting := p.accepting()
	cutOff := false
	if c, ok := p.deps.Health.(CutOffReporter); ok {
		cutOff = c.CutOff()
	}
	if !loaded || !accepting || cutOff || p.fleet.view().eligible == 0 {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"not ready","registry_loaded":` + boolJSON(loaded) + `,"accepting":` + boolJSON(accepting) +
			`,"cut_off":` + boolJSON(cutOff) + `}`)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ready"}`)
}

func boolJSON(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// serverError answers errors fasthttp meets before a handler runs: an
// oversized body (413) or header (431) above all, which are refused before
// any worker is chosen. The client may still be sending, so the connection
// lingers: it reads the answer instead of a reset. The message never echoes
// what the client sent.
func (p *Proxy) serverError(ctx *fasthttp.RequestCtx, err error) {
	if ec := edge.Of(ctx.Conn()); ec != nil {
		ec.LingerOnClose()
	}
	reason := p.serverRefusal(ctx, err)
	p.refusals.Refused(ctx, refusals.BeforeRouting, ctx.Response.StatusCode(), reason, true)
}

// serverRefusal answers an error fasthttp met, and names it for the
// refusals' count.
func (p *Proxy) serverRefusal(ctx *fasthttp.RequestCtx, err error) string {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, edge.ErrBareLF):
		failure.Write(ctx, failure.Errorf(failure.ErrBadRequest, "%v", edge.ErrBareLF))
		return "bare_lf"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		failure.Write(ctx, tooLarge(p.cfg.MaxPayloadSize))
		return failure.Type(failure.ErrTooLarge)
	case errors.As(err, &small):
		failure.WriteStatus(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "invalid_request_error",
			fmt.Sprintf("request line and headers exceed the limit of %d bytes", p.cfg.Edge.MaxHeaderSize))
		return "headers_too_large"
	case isTimeout(err):
		failure.WriteStatus(ctx, fasthttp.StatusRequestTimeout, "invalid_request_error", "the request was not received in time")
		return "header_timeout"
	}
	failure.Write(ctx, failure.Errorf(failure.ErrBadRequest, "malformed HTTP request"))
	return failure.Type(failure.ErrBadRequest)
}

// expect answers "Expect: 100-continue": a request the door would refuse
// on its headers (no key, a body announced over the limit) is refused
// before the client sends its body. The admin API's paths are left to it.
func (p *Proxy) expect(ctx *fasthttp.RequestCtx) int {
	rt := routeOf(ctx)
	if rt == noRoute {
		rt = &apiRoute{name: noRoute.name, access: open} // perhaps the admin API's: only the size
	}
	who := p.door.keys.CallerOf(&ctx.Request.Header)
	if err := p.door.headersAllow(ctx, rt, &who); err != nil {
		p.door.turnAway(ctx, rt, err, nil, time.Now()) // the request's time is not set before its body
		return ctx.Response.StatusCode()
	}
	return fasthttp.StatusContinue
}

// fasthttpLogger sends fasthttp's own messages (a client that sent an
// oversized body, a broken connection) to the debug log.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "http")
}
