package main

import (
	"log/slog"

	"github.com/urfave/cli/v2"
)

// compatFlag is a vllm-router flag accepted so that a command line written
// for vllm-router starts this router unchanged, where the flag has no
// counterpart here; notice says, once at start, what happens instead.
type compatFlag struct {
	flag   cli.Flag
	notice string
}

// compatibleFlags are vllm-router's flags that have no counterpart here,
// with vllm-router's defaults.
var compatibleFlags = []compatFlag{
	{intFlag("worker-startup-timeout-secs", 600, "vllm-router: how long to wait for workers at start"),
		"workers are probed as soon as they are registered and get traffic once they answer; /readiness says when one does"},
	{intFlag("worker-startup-check-interval", 30, "vllm-router: seconds between startup checks and power_of_two load polls"),
		"power_of_two reads the tier's own in-flight counts; new workers are probed at once, then with --health-check-interval-secs"},
	{intFlag("cb-window-duration-secs", 120, "vllm-router: unused there too"),
		"it has no effect, as in vllm-router: --cb-failure-threshold counts consecutive failures"},
	{intFlag("intra-node-data-parallel-size", 1, "vllm-router: data-parallel ranks per worker URL"),
		"each worker URL is routed as one engine; register data-parallel ranks as workers of their own"},
	{stringFlag("backend", "vllm", "vllm-router: the engine family (vllm, trtllm, openai, anthropic)"),
		"the router speaks vLLM's OpenAI-compatible API to every worker"},
	{stringFlag("runtime", "vllm", "vllm-router: alias of --backend"),
		"the router speaks vLLM's OpenAI-compatible API to every worker"},
	{boolFlag("mini-lb", "vllm-router: the Python debug load balancer"), "there is one router; the flag does nothing"},
	{boolFlag("enable-igw", "vllm-router: Inference Gateway mode"),
		"every model a worker serves is routed already (the request's model picks the workers)"},
	{stringFlag("history-backend", "memory", "vllm-router: where gateway mode stores conversation history"),
		"stored responses live on the worker that made them, and requests about them are routed there"},
	{boolFlag("profile", "vllm-router: profiling calls to workers"), "profiling calls are not made"},
	{stringFlag("vllm-discovery-address", "", "vllm-router: ZMQ registration address for vLLM workers"),
		"workers come from --worker-urls, --prefill, --decode and the admin API"},
	{stringFlag("kv-connector", "nixl", "vllm-router: the P/D KV transfer connector (nixl, mooncake, moriio)"),
		"the prefill's kv_transfer_params are passed to the decode whatever the connector (the engines interpret them)"},
	{boolFlag("enable-program-scheduling", "vllm-router: program-level scheduling"),
		"requests are routed one by one; a program's turns stay together through prefix affinity"},
	{stringFlag("program-scheduling-config-json", "", "vllm-router: program scheduling settings"),
		"program scheduling is not built; the flag does nothing"},
	{sliceFlag("api-key-validation-urls", "vllm-router: URLs that validate client keys"),
		"client keys are checked against --api-keys"},
	{stringFlag("wasm-middleware", "", "vllm-router: a WASM OnRequest middleware"), "WASM middleware is not supported; requests are not rewritten"},
	{stringFlag("wasm-middleware-sha256", "", "vllm-router: the middleware's digest"), "WASM middleware is not supported"},
	{sliceFlag("wasm-middleware-route", "vllm-router: paths the middleware runs on"), "WASM middleware is not supported"},
}

// compatFlags are the flags of compatibleFlags, for the command.
func compatFlags() []cli.Flag {
	out := make([]cli.Flag, 0, len(compatibleFlags))
	for _, f := range compatibleFlags {
		out = append(out, f.flag)
	}
	return out
}

// noticeCompatFlags says once, for every vllm-router flag given that has no
// counterpart here, what the router does instead.
func noticeCompatFlags(c *cli.Context, log *slog.Logger) {
	for _, f := range compatibleFlags {
		name := f.flag.Names()[0]
		if c.IsSet(name) {
			log.Warn("a vllm-router flag without a counterpart here", "flag", "--"+name, "instead", f.notice)
		}
	}
}
