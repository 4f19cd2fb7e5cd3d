package proxy

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help text of every family the request path registers, one line each,
// served on /metrics. A family registered without one here keeps an empty
// help line, which the tests that scrape a live replica refuse.
var _ = exposition.Describe(map[string]string{
	"vllm_router_requests_total":                "Inference requests finished, by route.",
	"vllm_router_request_duration_seconds":      "Time from a request's arrival to the end of its answer, by route.",
	"vllm_router_request_errors_total":          "Requests that failed as the client saw them, by route, status and error_type (the router's own refusals, worker answers passed on, cut streams).",
	"vllm_router_routing_duration_seconds":      "Time from arrival until the first worker is chosen: the door (key, admission, reading the body) and the routing decision, the placer's answer included.",
	"vllm_router_time_to_first_token_seconds":   "Streams: time from arrival until the first bytes of the answer, measured at the router.",
	"vllm_router_time_per_output_token_seconds": "Streams: time between SSE events after the first, measured at the router.",
	"vllm_router_retries_total":                 "Attempts after the first of a request or P/D phase.",
	"vllm_router_retries_exhausted_total":       "Requests or P/D phases whose every attempt failed.",
	"vllm_router_client_disconnects_total":      "Clients that left before their answer ended.",
	"vllm_router_stream_errors_total":           "Streams cut after their first byte (also counted in vllm_router_request_errors_total).",
	"vllm_router_stream_migrations_total":       "Streams cut by their worker after the first byte, or moved off a drained one, by result: resumed on another worker, failed (no worker took the continuation, or it failed before its first byte), unresumable (its shape, --migration-limit or the buffer bounds).",
	"vllm_router_stream_migration_seconds":      "Time from a stream's cut (or a drain's move) to the first bytes of its continuation on another worker.",
	"vllm_router_preemptions_total":             "Preemptions by resume (--preempt-by-resume), by result: asked (a request that took its reserved slot back asked a borrower's stream on its worker to give way), no_borrower (none there could), resumed (the stream gave way and resumed), failed (its client left or its deadline passed while it waited, or no worker took the continuation), unresumable (it could no longer resume when asked: it kept its slot).",
	"vllm_router_preemption_pause_seconds":      "Time a preempted stream paused: from giving its slot back to the first bytes of its continuation.",
	"vllm_router_cache_hits_total":              "Routing decisions that found the request's prefix on a candidate worker.",
	"vllm_router_cache_misses_total":            "Routing decisions that found no worker holding enough of the request's prefix.",
	"vllm_router_load_balancing_events_total":   "Hits sent elsewhere because their owner was overloaded.",
	"vllm_router_load_underflows_total":         "Releases that would have driven an in-flight count below zero (should stay 0).",
	"vllm_router_active_workers":                "Workers eligible for traffic on this replica.",
	"vllm_router_request_body_bytes_held":       "Bytes of request bodies this replica holds now, as they arrive, bounded by --max-buffered-body-bytes.",
	"vllm_router_refusals_total":                "Requests refused before they were served, by route (of the route table, or (before routing), (connection)) and reason.",
	"vllm_router_index_blocks":                  "Blocks the ownership index charges to its workers' budgets, summed over the workers.",
	"vllm_router_index_workers":                 "Workers the ownership index keeps a table for (a removed worker's is dropped).",
	"vllm_router_stored_response_owner_bytes":   "Bytes the owners of stored responses this replica remembers take, at most 16 MiB (the least recently used forgotten first).",
	"vllm_router_processed_requests_total":      "Attempts each worker answered, by worker URL.",
	"vllm_router_policy_decisions_total":        "Selections made by each policy, by policy and worker URL.",
	"vllm_router_worker_load":                   "In-flight requests of each worker, merged over the replicas.",
	"vllm_router_worker_prefill_backlog_bytes":  "Uncached prompt bytes of each worker's in-flight requests whose first token has not come, merged over the replicas.",
	"vllm_router_worker_health":                 "1 when the worker is eligible for traffic on this replica, else 0.",
	"vllm_router_pd_requests_total":             "Requests routed through prefill/decode disaggregation.",
	"vllm_router_pd_prefill_requests_total":     "Prefill phases sent to a prefill worker.",
	"vllm_router_pd_decode_requests_total":      "Decode phases sent to a decode worker.",
	"vllm_router_pd_errors_total":               "Disaggregated requests that failed, by the phase that failed.",
	"vllm_router_pd_request_duration_seconds":   "Time of a disaggregated request, from arrival to the end of its decode.",
})
