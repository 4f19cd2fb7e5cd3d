// Package kvevents hears what each engine holds in its KV cache from the
// engine's own events, instead of guessing it from routing decisions.
//
// vLLM (with --kv-events-config) publishes batches of BlockStored,
// BlockRemoved and AllBlocksCleared events as msgpack over a ZMQ PUB socket,
// each batch numbered, and keeps its last batches on a ROUTER socket for
// replay. This package decodes those batches in both encodings vLLM has used
// (positional arrays and keyed maps), keys every block by the router's own
// chained hash of its token IDs (so nothing depends on reproducing the
// engine's hash), keeps per worker the bounded set of blocks the engine holds
// now, and follows each worker's sequence numbers: a gap is fetched from the
// replay socket, a sequence that rewinds (an engine restarted at the same
// address) clears that worker's set, and a gap that cannot be repaired clears
// the set too, so the set may be incomplete (a miss) but is never stale (a
// false hit).
//
// Decode, Set and Sequence are pure and take no clock; Subscriber owns the
// sockets of one worker and Publisher is the engine's side, used by the
// simulated worker and the tests.
package kvevents
