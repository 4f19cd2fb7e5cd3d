package adminapi

import "github.com/kvrouter/kvrouter/store"

// RoutingView is the answer of GET /cluster/routing and the body of PUT:
// the config and the Raft index it was set at, which a PUT names to
// replace it (compare-and-set; 0 when no config was ever set).
type RoutingView struct {
	Index  uint64              `json:"index"`
	Config store.RoutingConfig `json:"config"`
	// Source is "registry", or "flags" while the registry has no config
	// yet (this replica's flags, which will seed it).
	Source string `json:"source,omitempty"`
}
