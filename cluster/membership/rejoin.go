package membership

import (
	"context"
	"slices"
	"time"
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

// RunRejoin keeps this replica's gossip whole until ctx ends. selfAddr is
// this replica's own gossip address, never joined.
func (m *Membership) RunRejoin(ctx context.Context, selfAddr string) {
	wait := rejoinFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(wait):
		}
		missing := m.missingMembers(ctx)
		if len(missing) == 0 {
			wait = rejoinFirst
			continue
		}
		addrs := m.rejoinAddrs(missing, selfAddr)
		if err := m.gossip.Join(addrs); err != nil {
			m.cfg.Logger.Debug("rejoin: no address answered; will retry", "missing", missing, "addrs", addrs, "in", wait, "err", err)
			wait = min(wait*2, rejoinMax)
			continue
		}
		m.cfg.Logger.Info("rejoin: joined the gossip again", "missing", missing, "addrs", addrs)
		wait = rejoinFirst
	}
}

// missingMembers names the members of the Raft configuration that are not
// live gossip members here. A replica outside any Raft configuration yet
// (it has not been bootstrapped or added) misses nobody: Start's --join
// brings it in.
func (m *Membership) missingMembers(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	servers, err := m.raft.Servers(ctx)
	if err != nil {
		return nil
	}
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
