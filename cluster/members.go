package cluster

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/cluster/membership"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/loadsync"
)

// newMembership is a replica's membership planner and rejoin loop, as its
// config c says, over its Raft node and its gossip; joined says whether it
// holds Raft state.
func newMembership(c Config, clk clock.WithTicker, log *slog.Logger, node *raftnode.Node, gossip gossipMembers,
	joined bool) *membership.Membership {
	cfg := membership.Config{Self: c.NodeName, Expect: c.BootstrapExpect, Join: c.Join,
		ReconcileInterval: c.ReconcileInterval, ReapTimeout: c.ReapTimeout,
		Stabilization: c.Stabilization, Clock: clk, Logger: log}
	return membership.New(cfg, raftMembers{node}, gossip, joined)
}

// raftMembers is the Raft node as membership sees it.
type raftMembers struct{ n *raftnode.Node }

var _ membership.Raft = raftMembers{}

func (m raftMembers) Servers(ctx context.Context) ([]membership.Server, error) {
	servers, err := m.n.Servers(ctx)
	out := make([]membership.Server, len(servers))
	for i, s := range servers {
		out[i] = membership.Server{ID: s.ID, Addr: s.Addr, Suffrage: s.Suffrage}
	}
	return out, err
}

func (m raftMembers) AddVoter(ctx context.Context, id, addr string) error {
	return m.n.AddVoter(ctx, id, addr)
}

func (m raftMembers) AddNonvoter(ctx context.Context, id, addr string) error {
	return m.n.AddNonvoter(ctx, id, addr)
}

func (m raftMembers) RemoveServer(ctx context.Context, id string) error {
	return m.n.RemoveServer(ctx, id)
}
func (m raftMembers) IsLeader() bool                 { return m.n.IsLeader() }
func (m raftMembers) LeaderChanges() <-chan struct{} { return m.n.LeaderChanges() }

// Bootstrap is BootstrapCluster; a node that holds state already has
// nothing to do.
func (m raftMembers) Bootstrap(ctx context.Context, voters []membership.Server) error {
	servers := make([]raftnode.Server, len(voters))
	for i, v := range voters {
		servers[i] = raftnode.Server{ID: v.ID, Addr: v.Addr, Suffrage: v.Suffrage}
	}
	if err := m.n.BootstrapCluster(ctx, servers); err != nil && !errors.Is(err, raftnode.ErrAlreadyBootstrapped) {
		return err
	}
	return nil
}

// gossipMembers is the replica's gossip as membership sees it, with the
// peers' load reports from sync. It reads the gossip node at every call:
// tests swap it (cutGossip). sync is read at every call too: the core that
// holds it is built after the membership.
type gossipMembers struct {
	gossip *replicaGossip
	sync   func() *loadsync.State
}

var _ membership.Source = gossipMembers{}

func (g gossipMembers) Members() []loadsync.Member { return g.gossip.current().Members() }
func (g gossipMembers) Join(addrs []string) error  { return g.gossip.current().Join(addrs) }

func (g gossipMembers) AnnounceJoined() error {
	return g.gossip.current().SetTags(g.gossip.tags(true))
}

// gossipingWithin is how recent a peer's last load report must be for the
// leader to count it as still gossiping, whatever memberlist's verdict on
// it: a replica that memberlist declared dead (it stalled, or only some of
// its packets get through) but whose reports still arrive is not reaped.
const gossipingWithin = 2 * time.Second

// Reporting is the set of peers whose load reports arrived within
// gossipingWithin.
func (g gossipMembers) Reporting(now time.Time) map[string]bool {
	out := map[string]bool{}
	for _, o := range g.sync().Origins(now) {
		if o.Age < gossipingWithin {
			out[o.Origin] = true
		}
	}
	return out
}
