package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/internal/exposition"
)

// maxBodyBytes bounds a request body; long agentic contexts run to megabytes.
const maxBodyBytes = 64 << 20

// server is one simulated worker: the HTTP front on fasthttp and the engine driver behind it. It
// routes each path to the collaborator that serves it.
type server struct {
	cfg       serverConfig
	workerID  string
	driver    *driver
	kv        *kvEventPublisher // nil unless --kv-events-endpoint
	metrics   *workerMetrics
	http      *fasthttp.Server
	parsers   fastjson.ParserPool
	endpoints map[string]endpoint // by path, built once at start

	faults    *faultInjector
	reply     *replier
	jobs      *jobRunner
	models    *modelCatalog
	inference *inferenceAPI
	tokenizer *tokenizer
	responses *responsesAPI
	admin     *engineAdmin

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
	s := &server{cfg: cfg, workerID: cmp.Or(cfg.workerID, addr.String()), stopping: make(chan struct{})}
	s.faults = newFaultInjector(cfg.seed, exit, s.stopping)
	if s.kv, err = newKVEventPublisher(cfg); err != nil {
		return nil, fmt.Errorf("%w --kv-events-endpoint: %w", errBadFlag, err)
	}
	if s.kv != nil {
		s.kv.muted = func() bool { return s.faults.mode() == faultMuteKV }
		s.kv.garbled = func() bool { return s.faults.mode() == faultGarbleKV }
	}
	s.driver = newPublishingDriver(cfg.engine, cfg.timeScale, clk, s.kv)
	s.faults.engine = s.driver
	s.metrics = newWorkerMetrics(cfg.models[0], cfg.engine.BlockTokens, &s.driver.stats, s.faults.mode)
	s.driver.SetLatency(&s.metrics.latency)
	if s.kv != nil {
		// What a subscriber must have heard to be up to date (its next
		// expected sequence number), for a test or an operator to wait on.
		s.metrics.set.NewGauge("workersim_kv_events_next_sequence", func() float64 { return float64(s.kv.pub.Next()) })
	}
	if cfg.lora {
		s.metrics.registerLoRAMetrics(cfg.engine.MaxLoras, &s.driver.stats,
			func() float64 { return float64(clk.Now().UnixNano()) / 1e9 })
	}
	s.assemble(host, port)
	if err := s.faults.set(cfg.fault); err != nil {
		s.driver.Stop()
		s.kv.close()
		return nil, err
	}
	return s, nil
}

// assemble builds the collaborators that serve the endpoints, over the driver and metrics, and
// the routing table and HTTP server in front of them.
func (s *server) assemble(host string, port int) {
	created := time.Now().Unix()
	s.reply = &replier{workerID: s.workerID, metrics: s.metrics}
	s.jobs = &jobRunner{driver: s.driver, metrics: s.metrics, faults: s.faults, reply: s.reply,
		parsers: &s.parsers, stopping: s.stopping}
	s.models = &modelCatalog{cfg: s.cfg, created: created, adapters: newAdapterSet(s.cfg.loras), reply: s.reply}
	ids := &responseIDs{created: created, tag: responseIDTag(s.workerID, time.Now())}
	s.inference = &inferenceAPI{cfg: s.cfg, created: created, models: s.models, ids: ids, jobs: s.jobs,
		planner: &pdPlanner{cfg: s.cfg, workerID: s.workerID, host: host, port: port, models: s.models}}
	s.tokenizer = &tokenizer{cfg: s.cfg, models: s.models, reply: s.reply, parsers: &s.parsers}
	s.responses = &responsesAPI{store: newResponseStore(s.cfg.maxStoredResponses), ids: ids, models: s.models,
		jobs: s.jobs, reply: s.reply, stopping: s.stopping}
	s.admin = &engineAdmin{cfg: s.cfg, host: host, port: port, driver: s.driver, jobs: s.jobs, faults: s.faults,
		reply: s.reply, parsers: &s.parsers}
	s.endpoints = s.routes()
	s.http = &fasthttp.Server{
		Handler:            s.handle,
		Name:               "workersim",
		MaxRequestBodySize: maxBodyBytes,
		CloseOnShutdown:    true,
	}
}

// Serve answers connections from ln until Shutdown.
func (s *server) Serve(ln net.Listener) error {
	return s.http.Serve(ln)
}

// Shutdown ends the requests in flight (background responses included), closes the listener and
// connections, and stops the engine. Idempotent.
func (s *server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.faults.disarm()
	err := s.http.ShutdownWithContext(ctx)
	s.responses.bg.Close()
	s.driver.Stop()
	s.kv.close()
	return err
}

func (s *server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4")
	exposition.Write(ctx, s.metrics.set)
}
