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
}
