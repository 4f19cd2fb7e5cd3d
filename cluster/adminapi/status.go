package adminapi

import (
	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/store"
)

// WorkerLoad is one worker's row in GET /get_loads: its registry entry, its
// merged in-flight load (this replica's plus the peers' latest reports), this
// replica's own share, its prefill backlog likewise (bytes of uncached
// prompt whose first token has not come), and this replica's health verdict.
type WorkerLoad struct {
	ID        store.WorkerID `json:"id"`
	Worker    string         `json:"worker"` // the URL, under vllm-router's name
	URL       string         `json:"url"`
	Role      string         `json:"role"`
	Load      int64          `json:"load"`
	LocalLoad int64          `json:"local_load"`
	// PrefillBacklog is merged like Load, LocalPrefillBacklog this
	// replica's own: what least_prefill places misses by.
	PrefillBacklog      int64  `json:"prefill_backlog_bytes"`
	LocalPrefillBacklog int64  `json:"local_prefill_backlog_bytes"`
	Healthy             bool   `json:"healthy"`
	State               string `json:"state"`
}

// Status is the answer of GET /cluster/status.
type Status struct {
	Node      string       `json:"node"`
	Members   []Member     `json:"members"`
	Leader    string       `json:"leader"`
	Term      uint64       `json:"term"`
	Voters    []string     `json:"voters"`
	Nonvoters []string     `json:"nonvoters"`
	Peers     []PeerStatus `json:"peers"`
	Workers   int          `json:"workers"`
	// Admission is the door's queue: per class, and the busiest tenants.
	Admission *admission.Stats `json:"admission,omitempty"`
}

// Member is one replica: a live gossip member, or a member of the Raft
// configuration that is not (yet, or any more) a live gossip member.
type Member struct {
	Name string `json:"name"`
	// Address is its gossip address, the last one known for a replica
	// that is not live; empty for one this replica never saw.
	Address string `json:"address"`
	// State is "alive", "left" (it said goodbye), "dead" (it stopped
	// answering) or "unknown" (in the Raft configuration, never seen here).
	State       string `json:"state"`
	RaftAddress string `json:"raft_address,omitempty"`
	APIAddress  string `json:"api_address,omitempty"`
	// Suffrage is "voter" or "nonvoter" in the Raft configuration; empty
	// for a live replica the leader has not added yet.
	Suffrage string `json:"suffrage,omitempty"`
	// Release is the release a live replica runs, as it announced it
	// ("v0.1.0 or earlier" for a build that announced none): during a
	// rolling upgrade, which replicas run what.
	Release string `json:"release,omitempty"`
}

// PeerStatus is how fresh another replica's load report is.
type PeerStatus struct {
	Name string `json:"name"`
	// LastReportAge is how long ago its last load report arrived, in
	// seconds; -1 when none has.
	LastReportAge float64 `json:"last_report_age_seconds"`
	// LastLag is that report's receive time minus its send time, in
	// seconds (meaningful when the clocks agree).
	LastLag float64 `json:"last_lag_seconds"`
}
