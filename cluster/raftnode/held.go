package raftnode

import (
	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/link"
)

// heldTransport is Raft's network transport with its AppendEntries held
// while the follower cannot be reached: a failed RPC is tried again on the
// cluster port's redial cadence (link.Port.Hold) instead of going back to
// Raft as a failure.
//
// hashicorp/raft sleeps after each failed AppendEntries to a follower,
// doubling from 10 ms up to 10.24 s, and nothing wakes that sleep. The
// port's held dials keep a refused dial from counting, but not an RPC that
// fails after its connection was made: a black hole (the request swallowed,
// the RPC runs into its 3 s timeout), a network that takes connections and
// resets them, a pooled connection that died with the partition. A follower
// cut off for 25 s that way had cost the leader a dozen failures, and the
// write made right after the heal reached it only when the 10 s sleep
// ended. Held, the partition costs Raft one failure per hold at most, and
// the follower gets the next entries within a redial of the heal.
//
// AppendEntries may be sent again: a follower's log takes the same entries
// at the same index once. Heartbeats are AppendEntries too and hold alike
// (Raft caps their own backoff at half a heartbeat timeout anyway). Votes
// and snapshots are not held: an election must hear of a failure, and a
// snapshot's stream cannot be replayed.
type heldTransport struct {
	*raft.NetworkTransport
	port *link.Port
}

var _ raft.WithPreVote = heldTransport{}

// AppendEntries sends args, trying again while it fails for up to the
// port's hold, until the port closes or stops holding.
func (t heldTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress,
	args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.port.Hold(func() error { return t.NetworkTransport.AppendEntries(id, target, args, resp) })
}
