package adminapi

import "github.com/kvrouter/kvrouter/store"

// History is the answer of GET /cluster/history: this replica's samples,
// oldest first, one every EverySeconds over the last SpanSeconds.
type History struct {
	Node         string   `json:"node"`
	EverySeconds float64  `json:"every_seconds"`
	SpanSeconds  float64  `json:"span_seconds"`
	Samples      []Sample `json:"samples"`
}

// Sample is the figures of every registered worker at one moment, with the
// field names of /cluster/workers.
type Sample struct {
	// At is when the figures were read, in Unix seconds.
	At      float64        `json:"at"`
	Workers []WorkerSample `json:"workers"`
}

// WorkerSample is one worker's part of a sample: its merged load, and its
// counters since this replica first routed to it (cumulative; a reader
// takes rates from two samples).
type WorkerSample struct {
	ID     store.WorkerID `json:"id"`
	Load   int64          `json:"load"`
	Hits   uint64         `json:"hits"`
	Misses uint64         `json:"misses"`
	Tokens uint64         `json:"tokens"`
}
