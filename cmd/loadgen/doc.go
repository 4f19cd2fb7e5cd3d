// Loadgen drives an OpenAI-compatible server (a router replica or a single worker), or several
// of them as a load balancer would (--target repeated: a random one per request, or with
// --balance session every turn of a session through the same one; the next when the connection
// is refused or dropped before an answer), and reports what it did, honestly:
// every request streams over /v1/completions, or /v1/chat/completions with --endpoint chat, or
// Anthropic's /v1/messages with --endpoint messages (on either, an agentic session is a
// tool-calling agent's conversation, --tools), and the report gives
// requests, errors by kind, TTFT and latency percentiles, throughput, the share of prompt tokens
// the server answered from its prefix cache (from the usage of the final chunk) and how many
// requests each worker served (from the x-worker-id response header).
//
//	loadgen replay --trace FILE --target URL [--target URL ...] [--endpoint chat] [--rate-scale X] [--limit N] [--json OUT] ...
//	loadgen agentic --sessions N --turns T --target URL [--think-time D] [--json OUT] ...
//
// replay sends a Mooncake trace open loop: each request starts at its timestamp divided by
// --rate-scale, whether or not earlier ones have finished, and the schedule lag shows whether
// the generator kept up. agentic runs closed-loop sessions whose every turn resends the whole
// conversation so far. Every run ends by itself (--duration), and Ctrl-C stops it early and still
// reports what finished; requests cut by either are counted as cancelled, not as errors.
package main
