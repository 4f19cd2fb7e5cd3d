package main

import (
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// engineAdmin serves the endpoints that look at or act on the engine and the worker rather than
// run inference: the health checks, the prefix cache resets, SGLang's model and server info, the
// fault (admin.go) and the KV oracle (kvoracle.go).
type engineAdmin struct {
	cfg     serverConfig
	host    string // bound address, reported by /get_server_info
	port    int
	driver  *driver
	jobs    *jobRunner // waits for /health_generate's generation
	faults  *faultInjector
	reply   *replier
	parsers *fastjson.ParserPool
}

func (a *engineAdmin) handleHealth(ctx *fasthttp.RequestCtx) {
	a.faults.slowHealth()
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// healthPrompt is the prompt of /health_generate's generation: one token, less than a block, so
// it leaves nothing in the prefix cache (SGLang sends input_ids [0]).
var healthPrompt = []byte("ping")

// handleHealthGenerate serves SGLang's GET /health_generate: 200 once a one-token generation went
// through the engine, 503 when it fails or does not come within --health-generate-timeout (a
// wedged engine). It suffers the slow_health and errors faults as /health and inference do. The
// timeout, not the client's connection, bounds it: a health check is short and nobody cancels it.
func (a *engineAdmin) handleHealthGenerate(ctx *fasthttp.RequestCtx) {
	a.faults.slowHealth()
	if a.faults.drawError() {
		a.reply.writeError(ctx, errUnhealthy)
		return
	}
	t, err := a.driver.Submit(submission{prompt: healthPrompt, maxTokens: 1})
	if err != nil {
		a.reply.writeError(ctx, errUnhealthy)
		return
	}
	timeout := make(chan struct{})
	// Wall time on purpose: the bound is aimed at the caller's health-check interval.
	timer := time.AfterFunc(a.cfg.healthGenerateTimeout, func() { close(timeout) })
	defer timer.Stop()
	if _, err := a.jobs.await(t, timeout, nil, sim.Done); err != nil {
		a.driver.Cancel(t)
		a.reply.writeError(ctx, errUnhealthy)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// handleFlushCache serves SGLang's GET or POST /flush_cache: a plain-text answer, 200 when the
// prefix cache was emptied, 400 when requests running or waiting kept it.
func (a *engineAdmin) handleFlushCache(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	if !a.driver.ResetPrefixCache() {
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetBodyString("Cache not flushed: requests are running or waiting.\n")
		return
	}
	ctx.SetBodyString("Cache flushed.\n")
}

// handleResetPrefixCache serves vLLM's POST /reset_prefix_cache: 200 with no body when the
// prefix cache was emptied, 409 while requests hold its blocks (reset_running_requests, which
// would preempt them, is not simulated).
func (a *engineAdmin) handleResetPrefixCache(ctx *fasthttp.RequestCtx) {
	if !a.driver.ResetPrefixCache() {
		a.reply.writeError(ctx, errCacheBusy)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// handleModelInfo serves SGLang's GET /get_model_info.
func (a *engineAdmin) handleModelInfo(ctx *fasthttp.RequestCtx) {
	b := append([]byte(`{"model_path":`), appendJSONString(nil, a.cfg.models[0])...)
	b = append(b, `,"tokenizer_path":`...)
	b = appendJSONString(b, a.cfg.models[0])
	b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// handleServerInfo serves SGLang's GET /get_server_info: the server arguments a router reads
// (dp_size for data-parallel workers, the disaggregation mode), the engine's capacity, and its
// live state.
func (a *engineAdmin) handleServerInfo(ctx *fasthttp.RequestCtx) {
	e, st := a.cfg.engine, &a.driver.stats
	b := append([]byte(`{"model_path":`), appendJSONString(nil, a.cfg.models[0])...)
	b = append(b, `,"tokenizer_path":`...)
	b = appendJSONString(b, a.cfg.models[0])
	b = append(b, `,"served_model_name":`...)
	b = appendJSONString(b, a.cfg.models[0])
	b = append(b, `,"host":`...)
	b = appendJSONString(b, a.host)
	b = appendIntField(b, "port", a.port)
	b = append(b, `,"tp_size":1,"dp_size":1,"disaggregation_mode":`...)
	b = appendJSONString(b, a.disaggregationMode())
	b = appendIntField(b, "page_size", e.BlockTokens)
	b = appendIntField(b, "max_running_requests", e.MaxNumSeqs)
	b = appendIntField(b, "chunked_prefill_size", e.MaxBatchedTokens)
	b = appendIntField(b, "max_total_num_tokens", e.KVCapacityTokens)
	b = append(b, `,"internal_states":[{"num_running_reqs":`...)
	b = strconv.AppendInt(b, st.running.Load(), 10)
	b = append(b, `,"num_waiting_reqs":`...)
	b = strconv.AppendInt(b, st.waiting.Load(), 10)
	b = append(b, `,"token_usage":`...)
	b = strconv.AppendFloat(b, st.kvUsage(), 'g', -1, 64)
	b = append(b, `}],"version":"workersim"}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func appendIntField(dst []byte, key string, n int) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	return strconv.AppendInt(dst, int64(n), 10)
}

// disaggregationMode is SGLang's name for the worker's role.
func (a *engineAdmin) disaggregationMode() string {
	if a.cfg.role == roleBoth {
		return "null"
	}
	return string(a.cfg.role)
}
