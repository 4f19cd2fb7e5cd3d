package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// Config holds the request-path settings of a replica. Zero values take the
// defaults of DefaultConfig.
type Config struct {
	// MaxPayloadSize is the largest request body accepted, in bytes
	// (--max-payload-size, default 512 MiB). A body exactly this size is
	// routed; one byte more is refused with 413 before any worker is
	// contacted.
	MaxPayloadSize int
	// RequestTimeout bounds one upstream attempt, streaming included
	// (--request-timeout-secs, default 1800 s).
	RequestTimeout time.Duration
	// MaxConcurrentRequests caps inference requests in flight on this
	// replica; beyond it clients get 429 (--max-concurrent-requests, 0 =
	// no cap).
	MaxConcurrentRequests int
	// Retry says when and how a failed attempt is retried.
	Retry Retry
	// RequestIDHeaders are the client headers that may carry a request id,
	// in order of preference (--request-id-headers).
	RequestIDHeaders []string
	// APIKey, when set, is sent to workers as a bearer token on requests
	// that carry no Authorization of their own (--api-key).
	APIKey string
	// DialTimeout bounds connecting to a worker (default 10 s).
	DialTimeout time.Duration
	// BlockSize is the index's block size in bytes (--block-size), to turn a
	// worker's KV capacity into its index budget; 0 leaves budgets alone.
	BlockSize int
}

// Retry configures retries. Attempts happen only before any byte of the
// response reached the client, on connect errors and retryable statuses.
type Retry struct {
	MaxAttempts    int           // in total, first included (--retry-max-retries, default 5)
	InitialBackoff time.Duration // --retry-initial-backoff-ms, default 50 ms
	MaxBackoff     time.Duration // --retry-max-backoff-ms, default 30 s
	Multiplier     float64       // default 1.5
	Jitter         float64       // fraction of the backoff, default 0.2
}

// DefaultConfig returns the reference routers' defaults.
func DefaultConfig() Config {
	return Config{
		MaxPayloadSize:   512 << 20,
		RequestTimeout:   1800 * time.Second,
		Retry:            Retry{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 30 * time.Second, Multiplier: 1.5, Jitter: 0.2},
		RequestIDHeaders: []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		DialTimeout:      10 * time.Second,
	}
}

// Health is what the proxy needs of worker health: whether a worker may get
// traffic, and a tracker per attempt that it reports outcomes to. Begin
// fails when the worker's circuit refuses the attempt (open, or half-open
// with its trial slots taken); the proxy then picks another worker.
type Health interface {
	Eligible(affinity.WorkerID) bool
	Begin(affinity.WorkerID) (Attempt, error)
}

// Attempt receives the outcome of one attempt on one worker.
type Attempt interface {
	// Progress reports a first byte or a stream chunk carrying tokens.
	Progress(tokens int)
	// End reports how the attempt ended; calls after the first do nothing.
	End(Outcome)
}

// Outcome is how an attempt ended, as the circuit breaker should see it.
type Outcome int

const (
	// Succeeded: the worker answered with a status below 500.
	Succeeded Outcome = iota
	// Failed: a 5xx, a connect error, a reset or a timeout.
	Failed
	// Canceled: the client left; it says nothing about the worker.
	Canceled
)

// outcomeOf maps an upstream status to an Outcome.
func outcomeOf(status int) Outcome {
	if status >= 500 {
		return Failed
	}
	return Succeeded
}

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
	// PD, when set, disaggregates prefill and decode; Router then goes
	// unused for inference.
	PD *PD
}

// Proxy serves the inference API of one replica.
type Proxy struct {
	cfg      Config
	deps     Deps
	fleet    *Fleet
	metrics  *Metrics
	log      *slog.Logger
	inflight atomic.Int64
	pd       *disaggregation
	server   *fasthttp.Server
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New builds a proxy. Call Fleet().SetWorkers to give it workers.
func New(cfg Config, deps Deps) (*Proxy, error) {
	if deps.Loads == nil || deps.Router == nil || deps.Metrics == nil {
		return nil, errors.New("proxy: Loads, Router and Metrics are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Health == nil {
		deps.Health = allHealthy{}
	}
	p := &Proxy{cfg: withDefaults(cfg), deps: deps, metrics: newMetrics(deps.Metrics), log: deps.Logger}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	onRemove := func(id affinity.WorkerID) {
		if deps.Index != nil {
			deps.Index.RemoveWorker(id)
		}
	}
	p.fleet = newFleet(deps.Loads, deps.Health.Eligible, onRemove, p.cfg.DialTimeout)
	p.fleet.onPublish = func(v *view) { p.metrics.syncWorkers(v, deps.Loads, deps.Health.Eligible) }
	if deps.PD != nil {
		if deps.PD.Prefill == nil || deps.PD.Decode == nil || (deps.PD.Mode != PDVLLM && deps.PD.Mode != PDSGLang) {
			return nil, errors.New("proxy: disaggregation needs a mode and a prefill and a decode router")
		}
		p.pd = newDisaggregation(p, *deps.PD)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.discover(p.ctx)
	}()
	p.server = &fasthttp.Server{
		Handler:                       p.Handler,
		Name:                          "kvrouter",
		MaxRequestBodySize:            p.cfg.MaxPayloadSize,
		ErrorHandler:                  p.serverError,
		IdleTimeout:                   90 * time.Second,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		Logger:                        fasthttpLogger{deps.Logger},
	}
	return p, nil
}

func withDefaults(c Config) Config {
	d := DefaultConfig()
	if c.MaxPayloadSize <= 0 {
		c.MaxPayloadSize = d.MaxPayloadSize
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = d.Retry.MaxAttempts
	}
	if c.Retry.Multiplier < 1 {
		c.Retry.Multiplier = d.Retry.Multiplier
	}
	if c.Retry.MaxBackoff <= 0 {
		c.Retry.MaxBackoff = d.Retry.MaxBackoff
	}
	if len(c.RequestIDHeaders) == 0 {
		c.RequestIDHeaders = d.RequestIDHeaders
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	return c
}

// Fleet returns the proxy's view of the workers.
func (p *Proxy) Fleet() *Fleet { return p.fleet }

// Serve answers connections from ln until Shutdown.
func (p *Proxy) Serve(ln net.Listener) error { return p.server.Serve(ln) }

// Shutdown stops accepting, ends open connections and waits for background
// work of the proxy.
func (p *Proxy) Shutdown(ctx context.Context) error {
	err := p.server.ShutdownWithContext(ctx)
	p.cancel()
	p.wg.Wait()
	p.fleet.close()
	return err
}

// Handler routes one request.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	if p.deps.Admin != nil && p.deps.Admin(ctx) {
		return
	}
	path := ctx.Path()
	switch {
	case ctx.IsPost() && bytes.Equal(path, []byte("/v1/completions")):
		p.serveInference(ctx, completions)
	case ctx.IsPost() && bytes.Equal(path, []byte("/v1/chat/completions")):
		p.serveInference(ctx, chatCompletions)
	case ctx.IsGet() && bytes.Equal(path, []byte("/v1/models")):
		p.serveModels(ctx)
	case bytes.Equal(path, []byte("/health")), bytes.Equal(path, []byte("/liveness")):
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case bytes.Equal(path, []byte("/readiness")):
		p.serveReadiness(ctx)
	case ctx.IsGet() && bytes.Equal(path, []byte("/metrics")):
		ctx.SetContentType("text/plain; version=0.0.4")
		p.deps.Metrics.WritePrometheus(ctx)
	default:
		writeErrorStatus(ctx, fasthttp.StatusNotFound, "invalid_request_error", "no route for "+string(ctx.Method())+" "+string(path))
	}
}

func (p *Proxy) serveReadiness(ctx *fasthttp.RequestCtx) {
	loaded := p.deps.RegistryLoaded == nil || p.deps.RegistryLoaded()
	if !loaded || p.fleet.view().eligible == 0 {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"not ready","registry_loaded":` + boolJSON(loaded) + `}`)
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
// oversized body above all, which is refused before any worker is chosen.
func (p *Proxy) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, errorf(ErrTooLarge, "request body exceeds the limit of %d bytes", p.cfg.MaxPayloadSize))
		return
	}
	writeError(ctx, errorf(ErrBadRequest, "cannot read request: %v", err))
}

// requestID returns the client's request id, or a new one.
func (p *Proxy) requestID(ctx *fasthttp.RequestCtx) string {
	for _, h := range p.cfg.RequestIDHeaders {
		if v := ctx.Request.Header.Peek(h); len(v) > 0 {
			return string(v)
		}
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fasthttpLogger sends fasthttp's own messages (a client that sent an
// oversized body, a broken connection) to the debug log.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "http")
}

// allHealthy is the health of a proxy that tracks none.
type allHealthy struct{}

func (allHealthy) Eligible(affinity.WorkerID) bool          { return true }
func (allHealthy) Begin(affinity.WorkerID) (Attempt, error) { return noAttempt{}, nil }

type noAttempt struct{}

func (noAttempt) Progress(int) {}
func (noAttempt) End(Outcome)  {}
