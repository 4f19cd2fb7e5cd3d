package cluster

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help of the KV-event families (kvevents.go).
var _ = exposition.Describe(map[string]string{
	"vllm_router_kv_events_stream":      "1 for the state of each worker's KV-event stream (trusted, disconnected, replaying, recovering, stale), 0 for the others: every state but trusted routes the worker on the text index.",
	"vllm_router_kv_events_blocks":      "Blocks each worker's engine holds, as its KV events tell this replica.",
	"vllm_router_kv_events_resets":      "Times each worker's set was emptied since the replica started, by cause: lost (a gap the replay could not fill), rewind (the engine restarted), malformed (a batch that did not decode).",
	"vllm_router_kv_events_batches":     "KV-event batches applied for each worker since the replica started.",
	"vllm_router_kv_matched_candidates": "Candidates of requests with tokens matched since the replica started, by what matched them: events (the engine's set), text (an untrusted stream: the text index), reserved (an in-flight reservation deeper than the set).",
	"vllm_router_kv_routed_requests":    "Decisions made with the prompt's tokens on the engines' KV events since the replica started.",
})
