// Package workload describes the traffic that drives the router tier: production traces replayed
// request by request and synthetic agentic sessions whose prompts grow turn over turn. It is pure
// (no goroutines, no sockets, no clock) so that the same workload feeds the real-time load
// generator and the discrete-event simulator running on virtual time.
//
// Everything here is deterministic. A trace names its prompt blocks by id; [Texts] turns every id
// into a fixed text block whose bytes differ from any other block's within its first 16 bytes, so
// two synthesised prompts share a byte prefix exactly as long as their shared block ids (give or
// take those few bytes). [Agentic] builds closed-loop sessions whose prompts extend the previous
// turn's prompt byte for byte, all sessions sharing one system prompt; its randomness comes from
// its seed only, so a run is reproducible whatever order the turns complete in.
//
// A token is taken to be [TokenBytes] bytes of text throughout, the same approximation the
// simulated workers use.
package workload
