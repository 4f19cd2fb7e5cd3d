package main

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help text of every family the worker registers, one line each. The
// vllm: families keep vLLM's names and meaning.
var _ = exposition.Describe(map[string]string{
	"vllm:num_requests_running":               "Requests the engine is running now.",
	"vllm:num_requests_waiting":               "Requests waiting for the engine.",
	"vllm:kv_cache_usage_perc":                "Share of the KV cache in use, 0 to 1.",
	"vllm:prefix_cache_queries_total":         "Prompt tokens looked up in the prefix cache.",
	"vllm:prefix_cache_hits_total":            "Prompt tokens found in the prefix cache.",
	"vllm:generation_tokens_total":            "Tokens generated, counted at every engine step.",
	"vllm:num_preemptions_total":              "Running requests preempted for want of KV; always 0 here, since a request's KV is reserved at admission.",
	"vllm:prompt_tokens_total":                "Prompt tokens the engine took in.",
	"vllm:request_success_total":              "Requests finished, by finish reason.",
	"vllm:time_to_first_token_seconds":        "Time from a request's arrival at the engine to its first token, on engine time.",
	"vllm:e2e_request_latency_seconds":        "Time from a request's arrival at the engine to its end, on engine time.",
	"vllm:cache_config_info":                  "The KV cache's configuration, in its labels.",
	"workersim_requests_total":                "Inference requests received, by API path.",
	"workersim_requests_failed_total":         "Requests that failed, by reason.",
	"workersim_requests_cancelled_total":      "Requests whose client left before the answer ended.",
	"workersim_pd_requests_total":             "Disaggregated requests served, by phase.",
	"workersim_prefill_computed_tokens_total": "Prompt tokens computed rather than found in the prefix cache.",
	"workersim_kv_transfer_tokens_total":      "Tokens of KV cache received from prefill workers.",
	"workersim_kv_events_next_sequence":       "The sequence number of the next KV event batch: a subscriber expecting it has heard every batch.",
	"workersim_fault":                         "1 for the fault mode injected now (POST /admin/fault), 0 for the others.",
})
