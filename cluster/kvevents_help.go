package cluster

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help of the KV-event families (kvevents.go).
var _ = exposition.Describe(map[string]string{
	"vllm_router_kv_events_stream":       "1 for the state of each worker's KV-event stream (trusted, disconnected, unheard, replaying, recovering, stale), 0 for the others: every state but trusted routes the worker on the text index.",
	"vllm_router_kv_events_source":       "1 for where this replica hears each worker's engine (dial: it dials the engine; bind: the engine dialed this replica's --kv-events-bind; peer: a peer relays it), 0 for the others.",
	"vllm_router_kv_events_set_bytes":    "Bytes the tables of each worker's block set hold on this replica (at most about 15 a block).",
	"vllm_router_kv_events_violations":   "Connections to each worker's engine ended by a breach of ZMTP or of --kv-events-max-message-bytes, and its messages that were not [topic, sequence, payload], since the replica started.",
	"vllm_router_kv_events_bind_refused": "What the --kv-events-bind socket refused since the replica started, by cause: not_a_worker (a connection from no worker's address), protocol (a breach of ZMTP or of the limits), crowded (over the connection bounds), unknown, ambiguous, elsewhere (a topic naming no worker, several, or one on another address), claimed (a worker another connection feeds), unparsable (not [topic, sequence, payload]).",
	"vllm_router_kv_events_relay":        "The relay of the engines' events between replicas since this one started: received (batches taken from peers), unknown (for workers this replica does not know), malformed and mismatched (packets refused, or from peers whose sets are of another block size or bound), dropped (batches not sent for want of room), fetched and restored (snapshots asked of peers, and taken).",
	"vllm_router_kv_events_blocks":       "Blocks each worker's engine holds, as its KV events tell this replica.",
	"vllm_router_kv_events_resets":       "Times each worker's set was emptied since the replica started, by cause: lost (a gap the replay could not fill), rewind (the engine restarted), malformed (a batch that did not decode), peer (the relaying peer's stream was emptied), topic (the engine's topic changed).",
	"vllm_router_kv_events_batches":      "KV-event batches applied for each worker since the replica started.",
	"vllm_router_kv_matched_candidates":  "Candidates of requests with tokens matched since the replica started, by what matched them: events (the engine's set), text (an untrusted stream: the text index), reserved (an in-flight reservation deeper than the set).",
	"vllm_router_kv_routed_requests":     "Decisions made with the prompt's tokens on the engines' KV events since the replica started.",
})
