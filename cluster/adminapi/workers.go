package adminapi

import "github.com/kvrouter/kvrouter/store"

// WorkerStats is the answer of GET /cluster/workers: what this replica
// knows of every registered worker, for the status page (/ui) and for
// operators' scripts. Counters are cumulative since this replica first
// routed to the worker; a reader takes rates from two answers and At.
type WorkerStats struct {
	Node string `json:"node"`
	// At is when the figures were read, in Unix seconds.
	At      float64      `json:"at"`
	Workers []WorkerStat `json:"workers"`
}

// WorkerStat is one worker's row of GET /cluster/workers.
type WorkerStat struct {
	WorkerLoad
	Model string `json:"model,omitempty"`
	// PeerLoads is each other live replica's latest reported in-flight
	// count (non-zero ones): Load is LocalLoad plus their sum.
	PeerLoads map[string]int64 `json:"peer_loads"`
	// Probed: an active check has answered at least once.
	Probed bool `json:"probed"`
	// Circuit is "closed", "open" or "half_open".
	Circuit  string `json:"circuit"`
	Wedged   bool   `json:"wedged"`
	Degraded bool   `json:"degraded"`
	// RemoteVerdicts counts the replicas that hold a verdict against it.
	RemoteVerdicts int    `json:"remote_verdicts"`
	Hits           uint64 `json:"hits"`
	Misses         uint64 `json:"misses"`
	Tokens         uint64 `json:"tokens"`
	Processed      uint64 `json:"processed"`
	// KVEvents is the worker's KV-event stream, with --kv-events.
	KVEvents *KVEventsStat `json:"kv_events,omitempty"`
}

// KVEventsStat is a worker's KV-event stream: its state, what its engine
// holds as the events say, and the stream's counters since it was first
// heard.
type KVEventsStat struct {
	// State is trusted, disconnected, unheard, replaying, recovering or
	// stale: every state but trusted routes the worker on the text index.
	State string `json:"state"`
	// Source is where this replica hears the engine: dial (it dials the
	// engine's socket), bind (the engine dials this replica), peer (a peer
	// relays what it hears), or "" (nothing).
	Source string `json:"source"`
	Blocks int    `json:"blocks"`
	Bytes  int    `json:"bytes"` // what the set's tables hold
	// Epoch and Next are the stream's position: its resets, and the
	// sequence number it expects next.
	Epoch        uint32 `json:"epoch"`
	Next         uint64 `json:"next"`
	Batches      uint64 `json:"batches"`       // batches applied
	Events       uint64 `json:"events"`        // events applied
	Followed     uint64 `json:"followed"`      // batches applied from a peer's relay
	Restored     uint64 `json:"restored"`      // peers' snapshots taken
	Gaps         uint64 `json:"gaps"`          // gaps seen on the live stream
	Repaired     uint64 `json:"repaired"`      // gaps filled whole from the replay socket
	Lost         uint64 `json:"lost"`          // gaps the replay could not fill
	Rewinds      uint64 `json:"rewinds"`       // sequences that went back: the engine restarted
	Malformed    uint64 `json:"malformed"`     // batches that did not decode
	PeerResets   uint64 `json:"peer_resets"`   // a peer's stream emptied the set
	TopicChanges uint64 `json:"topic_changes"` // batches under another topic than before
	Unparsable   uint64 `json:"unparsable"`    // messages not [topic, sequence, payload]
	Orphans      uint64 `json:"orphans"`       // stored events that followed an unknown block
	Refused      uint64 `json:"refused"`       // stored events refused: set full or another block size
	Violations   uint64 `json:"violations"`    // connections ended by a breach of ZMTP or of the limits
}

// DrainMigrate is the drain query value of DELETE /workers/{id}: the
// worker's streams on the replica that serves the call move, each at its
// next chunk boundary, to other workers (those that cannot resume finish
// where they are, within the wait), and then the worker is removed.
const DrainMigrate = "migrate"

// RemovedWorker is the answer of DELETE /workers/{id}?drain=migrate: the
// worker as it was (store.Worker's fields), the streams asked to move,
// those still on it when it was removed, and how long the move took.
type RemovedWorker struct {
	store.Worker
	MovedStreams int     `json:"moved_streams"`
	StreamsLeft  int     `json:"streams_left"`
	Seconds      float64 `json:"seconds"`
}
