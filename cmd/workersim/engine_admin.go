package main

import (
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

// healthPrompt is the prompt of /health_generate's generation: one token, less than a block, so
// it leaves nothing in the prefix cache (SGLang sends input_ids [0]).
var healthPrompt = []byte("ping")

// handleHealthGenerate serves SGLang's GET /health_generate: 200 once a one-token generation went
// through the engine, 503 when it fails or does not come within --health-generate-timeout (a
// wedged engine). It suffers the slow_health and errors faults as /health and inference do. The
// timeout, not the client's connection, bounds it: a health check is short and nobody cancels it.
func (s *server) handleHealthGenerate(ctx *fasthttp.RequestCtx) {
	s.slowHealth()
	if s.drawError() {
		s.writeError(ctx, errUnhealthy)
		return
	}
	t, err := s.driver.Submit(submission{prompt: healthPrompt, maxTokens: 1})
	if err != nil {
		s.writeError(ctx, errUnhealthy)
		return
	}
	timeout := make(chan struct{})
	// Wall time on purpose: the bound is aimed at the caller's health-check interval.
	timer := time.AfterFunc(s.cfg.healthGenerateTimeout, func() { close(timeout) })
	defer timer.Stop()
	if _, err := s.await(t, timeout, nil, sim.Done); err != nil {
		s.driver.Cancel(t)
		s.writeError(ctx, errUnhealthy)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// handleFlushCache serves SGLang's GET or POST /flush_cache: a plain-text answer, 200 when the
// prefix cache was emptied, 400 when requests running or waiting kept it.
func (s *server) handleFlushCache(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	if !s.driver.ResetPrefixCache() {
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetBodyString("Cache not flushed: requests are running or waiting.\n")
		return
	}
	ctx.SetBodyString("Cache flushed.\n")
}

// handleResetPrefixCache serves vLLM's POST /reset_prefix_cache: 200 with no body when the
// prefix cache was emptied, 409 while requests hold its blocks (reset_running_requests, which
// would preempt them, is not simulated).
func (s *server) handleResetPrefixCache(ctx *fasthttp.RequestCtx) {
	if !s.driver.ResetPrefixCache() {
		s.writeError(ctx, errCacheBusy)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// handleModelInfo serves SGLang's GET /get_model_info.
func (s *server) handleModelInfo(ctx *fasthttp.RequestCtx) {
	b := append([]byte(`{"model_path":`), appendJSONString(nil, s.cfg.models[0])...)
	b = append(b, `,"tokenizer_path":`...)
	b = appendJSONString(b, s.cfg.models[0])
	b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// handleServerInfo serves SGLang's GET /get_server_info: the server arguments a router reads
// (dp_size for data-parallel workers, the disaggregation mode), the engine's capacity, and its
// live state.
func (s *server) handleServerInfo(ctx *fasthttp.RequestCtx) {
	e, st := s.cfg.engine, &s.driver.stats
	b := append([]byte(`{"model_path":`), appendJSONString(nil, s.cfg.models[0])...)
	b = append(b, `,"tokenizer_path":`...)
	b = appendJSONString(b, s.cfg.models[0])
	b = append(b, `,"served_model_name":`...)
	b = appendJSONString(b, s.cfg.models[0])
	b = append(b, `,"host":`...)
	b = appendJSONString(b, s.host)
	b = appendIntField(b, "port", s.port)
	b = append(b, `,"tp_size":1,"dp_size":1,"disaggregation_mode":`...)
	b = appendJSONString(b, s.disaggregationMode())
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
func (s *server) disaggregationMode() string {
	if s.cfg.role == roleBoth {
		return "null"
	}
	return string(s.cfg.role)
}
