package cluster

import (
	"context"

	"github.com/kvrouter/kvrouter/store"
)

// The registry as a writer outside the admin API sees it (Kubernetes
// discovery, cluster/discovery): reads of this replica's copy, whether this
// replica leads, and writes by the admin API's path (committed here on the
// leader, forwarded to it from a follower).

// RegistryWorkers returns the workers of this replica's copy of the
// registry.
func (r *Replica) RegistryWorkers() []store.Worker { return r.fsm.View().Workers() }

// IsLeader reports whether this replica is the Raft leader right now.
func (r *Replica) IsLeader() bool { return r.raft.IsLeader() }

// ApplyRegistry submits a registry write through the leader, bounded by ctx.
func (r *Replica) ApplyRegistry(ctx context.Context, cmd store.Command) (store.Result, error) {
	return r.writes.Apply(ctx, cmd)
}
