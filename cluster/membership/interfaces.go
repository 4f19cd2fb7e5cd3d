package membership

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// Tags a replica announces in its gossip metadata that membership reads.
const (
	// TagRaft is the Raft address peers dial.
	TagRaft = "raft"
	// TagExpect is the replica's --bootstrap-expect.
	TagExpect = "expect"
	// TagJoined is "1" once the replica holds Raft state.
	TagJoined = "joined"
	// TagLeaving is announced by a replica that is stopping, just before
	// it leaves the gossip: memberlist does not tell its peers whether a
	// member left or died, and this tag does.
	TagLeaving = "leaving"
)

// Suffrages of a Server.
const (
	Voter    = "voter"
	Nonvoter = "nonvoter"
)

// Server is one member of the Raft configuration.
type Server struct {
	ID   string
	Addr string
	// Suffrage is Voter, Nonvoter or "staging".
	Suffrage string
}

// Raft is what membership needs of the Raft node. Every method may be
// called from Run's goroutine only; the changes are leader-only.
type Raft interface {
	// Servers is the latest Raft configuration.
	Servers(ctx context.Context) ([]Server, error)
	AddVoter(ctx context.Context, id, addr string) error
	AddNonvoter(ctx context.Context, id, addr string) error
	RemoveServer(ctx context.Context, id string) error
	// Bootstrap makes voters the first configuration of a node without
	// state; a node that holds state already answers nil.
	Bootstrap(ctx context.Context, voters []Server) error
	IsLeader() bool
	// LeaderChanges is closed at the next change of leader or Raft state.
	LeaderChanges() <-chan struct{}
}

// Source is the gossip side: who is live, how to join again, and how to
// tell the peers that this replica holds Raft state.
type Source interface {
	// Members are the live gossip members, this replica included.
	Members() []loadsync.Member
	// Reporting names the peers whose load reports arrived recently at
	// now: still gossiping, whatever memberlist's verdict on them.
	Reporting(now time.Time) map[string]bool
	// Join contacts addrs to join the gossip again.
	Join(addrs []string) error
	// AnnounceJoined announces TagJoined.
	AnnounceJoined() error
}
