package adminapi

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
	// State is trusted, disconnected, replaying, recovering or stale: every
	// state but trusted routes the worker on the text index.
	State     string `json:"state"`
	Blocks    int    `json:"blocks"`
	Batches   uint64 `json:"batches"`   // batches applied
	Events    uint64 `json:"events"`    // events applied
	Gaps      uint64 `json:"gaps"`      // gaps seen on the live stream
	Repaired  uint64 `json:"repaired"`  // gaps filled whole from the replay socket
	Lost      uint64 `json:"lost"`      // gaps the replay could not fill
	Rewinds   uint64 `json:"rewinds"`   // sequences that went back: the engine restarted
	Malformed uint64 `json:"malformed"` // batches that did not decode
	Orphans   uint64 `json:"orphans"`   // stored events that followed an unknown block
	Refused   uint64 `json:"refused"`   // stored events refused: set full or another block size
}
