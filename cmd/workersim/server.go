package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/exposition"
)

// maxBodyBytes bounds a request body; long agentic contexts run to megabytes.
const maxBodyBytes = 64 << 20

// server is one simulated worker: the HTTP front on fasthttp and the engine driver behind it.
type server struct {
	cfg       serverConfig
	workerID  string
	host      string // bound address, announced to decode workers in kv_transfer_params
	port      int
	created   int64 // unix seconds at start, reported as created/owned times
	driver    *driver
	kv        *kvEventPublisher // nil unless --kv-events-endpoint
	metrics   *workerMetrics
	http      *fasthttp.Server
	parsers   fastjson.ParserPool
	endpoints map[string]endpoint // by path, built once at start
	responses *responseStore      // the Responses API's stored responses
	adapters  *adapterSet         // the LoRA adapters served now
	idTag     string              // names this worker and boot in response ids
	bg        goroutines          // background responses
	seq       atomic.Uint64       // response ids

	fault    atomic.Pointer[fault]
	faultMu  sync.Mutex // serialises fault changes
	crash    *time.Timer
	exit     func(code int)
	rngMu    sync.Mutex
	rng      *rand.Rand
	stopping chan struct{} // closed when shutdown begins
	stopOnce sync.Once
}

// newServer builds a worker bound to addr (the listener's address) and starts its engine on clk
// (the wall clock outside tests). exit ends the process (os.Exit outside tests). Serve and
// Shutdown run it.
func newServer(cfg serverConfig, addr net.Addr, clk clock.Clock, exit func(int)) (*server, error) {
	host, portText, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portText)
	s := &server{
		cfg:      cfg,
		workerID: cfg.workerID,
		host:     host,
		port:     port,
		created:  time.Now().Unix(),
		exit:     exit,
		rng:      rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		stopping: make(chan struct{}),
	}
	if s.workerID == "" {
		s.workerID = addr.String()
	}
	s.fault.Store(&fault{Mode: faultNone})
	s.endpoints = s.routes()
	s.adapters = newAdapterSet(cfg.loras)
	if cfg.lora {
		s.endpoints[pathLoadAdapter] = endpoint{post: s.handleLoadAdapter}
		s.endpoints[pathUnloadAdapter] = endpoint{post: s.handleUnloadAdapter}
	}
	s.responses = newResponseStore(cfg.maxStoredResponses)
	s.idTag = responseIDTag(s.workerID, time.Now())
	if s.kv, err = newKVEventPublisher(cfg); err != nil {
		return nil, fmt.Errorf("%w --kv-events-endpoint: %w", errBadFlag, err)
	}
	if s.kv != nil {
		s.kv.muted = func() bool { return s.fault.Load().Mode == faultMuteKV }
		s.kv.garbled = func() bool { return s.fault.Load().Mode == faultGarbleKV }
		s.endpoints[pathKVOracle] = endpoint{post: s.handleKVOracle}
	}
	s.driver = newPublishingDriver(cfg.engine, cfg.timeScale, clk, s.kv)
	s.metrics = newWorkerMetrics(cfg.models[0], cfg.engine.BlockTokens, &s.driver.stats,
		func() faultMode { return s.fault.Load().Mode })
	s.driver.SetLatency(&s.metrics.latency)
	if cfg.lora {
		s.metrics.registerLoRAMetrics(cfg.engine.MaxLoras, &s.driver.stats,
			func() float64 { return float64(clk.Now().UnixNano()) / 1e9 })
	}
	s.http = &fasthttp.Server{
		Handler:            s.handle,
		Name:               "workersim",
		MaxRequestBodySize: maxBodyBytes,
		CloseOnShutdown:    true,
	}
	if err := s.setFault(cfg.fault); err != nil {
		s.driver.Stop()
		s.kv.close()
		return nil, err
	}
	return s, nil
}

// Serve answers connections from ln until Shutdown.
func (s *server) Serve(ln net.Listener) error {
	return s.http.Serve(ln)
}

// Shutdown ends the requests in flight (background responses included), closes the listener and
// connections, and stops the engine. Idempotent.
func (s *server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.faultMu.Lock()
	if s.crash != nil {
		s.crash.Stop()
	}
	s.faultMu.Unlock()
	err := s.http.ShutdownWithContext(ctx)
	s.bg.Close()
	s.driver.Stop()
	s.kv.close()
	return err
}

func (s *server) setCommonHeaders(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(headerWorkerID, s.workerID)
}

// handleModels lists the models served, as vLLM does: each base model, then each LoRA adapter
// with its path as its root and the first model as its parent.
func (s *server) handleModels(ctx *fasthttp.RequestCtx) {
	b := []byte(`{"object":"list","data":[`)
	for i, m := range s.cfg.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendModel(b, m, m, "")
	}
	for _, a := range s.adapters.list() {
		b = s.appendModel(append(b, ','), a.Name, a.Path, s.cfg.models[0])
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, "]}"...))
}

// appendModel appends one model of /v1/models; parent "" is null (a base model).
func (s *server) appendModel(b []byte, id, root, parent string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, s.created, 10)
	b = append(b, `,"owned_by":"workersim","root":`...)
	b = appendJSONString(b, root)
	b = append(b, `,"parent":`...)
	if parent == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, parent)
	}
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.cfg.engine.KVCapacityTokens), 10)
	return append(b, '}')
}

func (s *server) handleHealth(ctx *fasthttp.RequestCtx) {
	s.slowHealth()
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// slowHealth holds a health check for the slow_health fault's delay.
func (s *server) slowHealth() {
	f := s.fault.Load()
	if f.Mode != faultSlowHealth {
		return
	}
	// Wall time on purpose: the delay is aimed at the router's health-check timeout.
	t := time.NewTimer(time.Duration(f.DelayMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stopping:
	}
}

func (s *server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4")
	exposition.Write(ctx, s.metrics.set)
}

// drawError reports whether the errors fault fails this request.
func (s *server) drawError() bool {
	f := s.fault.Load()
	if f.Mode != faultErrors {
		return false
	}
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64() < f.Rate
}

// nextID returns a response id unique within the process.
func (s *server) nextID(prefix string) string {
	return prefix + strconv.FormatUint(s.seq.Add(1), 36) + "-" + strconv.FormatInt(s.created, 36)
}
