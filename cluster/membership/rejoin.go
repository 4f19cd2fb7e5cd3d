package membership

import (
	"context"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// A partition, a stall or a restart can leave a replica's gossip with fewer
// live members than the Raft configuration holds: memberlist declared the
// others dead (and they it), and, left alone, memberlist never merges two
// sides again. The rejoin loop notices that and joins again, with backoff,
// until every member of the Raft configuration is live, so a partition of
// any length heals within a few seconds of the network healing.

// Rejoin backoff: the first retry after rejoinFirst, doubling up to
// rejoinMax, so a healed network is noticed within rejoinMax plus a join's
// round trip (well inside 10 s).
const (
	rejoinFirst = 500 * time.Millisecond
	rejoinMax   = 4 * time.Second
)

// RunRejoin keeps this replica's gossip whole until ctx ends, and, while
// it waits to be added to a cluster's Raft configuration, tells the members
// that hold Raft state of it first-hand (announce). selfAddr is this
// replica's own gossip address, never joined.
func (m *Membership) RunRejoin(ctx context.Context, selfAddr string) {
	wait := rejoinFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(wait):
		}
		servers, err := m.servers(ctx)
		switch {
		case err != nil:
			wait = rejoinFirst
		case len(servers) == 0:
			wait = m.announce(selfAddr, wait)
		default:
			wait = m.rejoin(servers, selfAddr, wait)
		}
	}
}

func (m *Membership) servers(ctx context.Context) ([]Server, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return m.raft.Servers(ctx)
}

// rejoin joins the last addresses of the members of servers that are not
// live here, if any, and returns the wait before the next look.
func (m *Membership) rejoin(servers []Server, selfAddr string, wait time.Duration) time.Duration {
	missing := m.missingMembers(servers)
	if len(missing) == 0 {
		return rejoinFirst
	}
	addrs := m.rejoinAddrs(missing, selfAddr)
	if err := m.gossip.Join(addrs); err != nil {
		m.cfg.Logger.Debug("rejoin: no address answered; will retry", "missing", missing, "addrs", addrs, "in", wait, "err", err)
		return min(wait*2, rejoinMax)
	}
	m.cfg.Logger.Info("rejoin: joined the gossip again", "missing", missing, "addrs", addrs)
	return rejoinFirst
}

// announce push/pulls with every member that holds Raft state, for a
// replica outside any Raft configuration, and returns the wait before the
// next look. The --join that brought it into the gossip told one member;
// the others, the leader among them, hear of it by memberlist's rumour,
// which goes to a few random members (RetransmitMult x log(n+1) sends: two
// on a local network of four) and can miss the leader. The leader would
// then learn of it only at a push/pull, one PushPullInterval later (15 s on
// a local network, 30 s on a LAN), up to twice that in a cluster that just
// started, and add it no sooner. It backs off as a failed rejoin does: a
// push/pull that reached the leader is answered by the leader adding this
// replica, which ends the announcing.
func (m *Membership) announce(selfAddr string, wait time.Duration) time.Duration {
	addrs := joinedAddrs(m.gossip.Members(), selfAddr)
	if len(addrs) == 0 {
		return rejoinFirst // a new cluster: BootstrapVoters' business
	}
	if err := m.gossip.Join(addrs); err != nil {
		m.cfg.Logger.Debug("announce: no member that holds raft state answered; will retry", "addrs", addrs, "in", wait, "err", err)
	}
	return min(wait*2, rejoinMax)
}

// joinedAddrs are the gossip addresses of the live members that announced
// TagJoined, but selfAddr.
func joinedAddrs(members []loadsync.Member, selfAddr string) []string {
	var out []string
	for _, mb := range members {
		if mb.Tags[TagJoined] == "1" && mb.Addr != selfAddr && !mb.Self {
			out = append(out, mb.Addr)
		}
	}
	return out
}

// missingMembers names the members of servers, the Raft configuration,
// that are not live gossip members here.
func (m *Membership) missingMembers(servers []Server) []string {
	live := map[string]bool{}
	for _, mb := range m.gossip.Members() {
		live[mb.Name] = true
	}
	var missing []string
	for _, s := range servers {
		if !live[s.ID] && s.ID != m.cfg.Self {
			missing = append(missing, s.ID)
		}
	}
	return missing
}

// rejoinAddrs is where to look for the missing members: their last known
// gossip addresses, then the --join addresses, without this replica's own.
func (m *Membership) rejoinAddrs(missing []string, self string) []string {
	var out []string
	for _, a := range append(m.lastAddrs(missing), m.cfg.Join...) {
		if a != self && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
