// Command workersim is a stand-in for a vLLM worker: it serves the OpenAI completion and chat
// APIs (streaming and not), embeddings, rerank, the Responses API (stored responses, background
// mode), Anthropic's Messages API as vLLM serves it (text and tool_use answers, count_tokens),
// SGLang's native /generate, /health_generate, /get_model_info, /get_server_info and
// /flush_cache, vLLM's /reset_prefix_cache, /v1/models, /health and vLLM's Prometheus metrics,
// and answers with deterministic filler text and vectors after the time a real engine would
// take. The timing and the prefix cache come from package sim, driven in real time (scaled by
// --time-scale), so a router that sends a prompt to the worker holding its prefix sees a faster
// first token, and a router that piles requests on one worker sees them queue.
//
// Every inference endpoint is an adapter that parses its body into a job (the engine requests it
// makes and a renderer of its answer); the rest of the path is shared: the errors fault, the
// engine, client-disconnect cancellation, streaming and metrics.
//
// It also plays the two halves of prefill/decode disaggregation (vLLM's kv_transfer_params and
// SGLang's bootstrap fields) and can be told, at start or at run time through /admin/fault, to
// crash, fail a share of requests, wedge, slow down or answer health checks slowly, so the
// router's retries, circuit breaker and progress detection can be exercised for real.
//
// Usage:
//
//	workersim --port 0 --model sim-model --time-scale 10
//
// With --port 0 the first line on stdout is "listening on HOST:PORT".
package main
