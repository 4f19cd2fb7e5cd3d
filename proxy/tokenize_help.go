package proxy

import "github.com/kvrouter/kvrouter/internal/exposition"

// The help of the tokenization families (tokenize.go).
var _ = exposition.Describe(map[string]string{
	"vllm_router_kv_tokenize_cache_bytes":      "Bytes the cached token IDs of prompts take now (4 a token and an entry's overhead), kept within --kv-events-tokenize-cache-bytes.",
	"vllm_router_kv_tokenize_total":            "Prompts tokenized for routing on the engines' KV events, by result: ok, cached, prefix (routed on an earlier prompt's tokens), peer (routed on the tokens the tier's keeper of the turn before's worker kept), slow (past --kv-events-tokenize-timeout: routed on the text index), failed (routed on the text index).",
	"vllm_router_kv_token_share_total":         "The tier's sharing of the prompts' tokens, by op and result: find (asked a keeper before an engine: found, none, failed), give (sent a keeper a prompt's tokens: kept, failed, dropped with 8 in flight), keep (kept a peer's).",
	"vllm_router_kv_token_share_in_flight":     "Prompts' tokens being given to their keepers now.",
	"vllm_router_kv_tokenize_duration_seconds": "Latency of the engines' /tokenize answers that came within the bound.",
	"vllm_router_kv_tokenize_added_seconds":    "Latency tokenization added to each request it was tried for: the engine's answer, a cached prompt's lookup, or the bound.",
})
