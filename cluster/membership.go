package cluster

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// membershipTimeout bounds one reconciliation round's Raft calls.
const membershipTimeout = 5 * time.Second

// membership is the state of the goroutine that keeps the Raft
// configuration in step with the gossip membership (runMembership). Only
// that goroutine reads and writes joined and missing; departed is also read
// by the status page.
type membership struct {
	kick   chan struct{} // capacity 1: "membership changed, look again"
	joined bool          // this replica holds Raft state and announced it
	// missing is, on the leader, since when each Raft server has been
	// absent from the gossip membership.
	missing map[string]time.Time

	mu       sync.Mutex
	departed map[string]string // name -> "left" or "dead", until it rejoins
}

func newMembership(joined bool) *membership {
	return &membership{kick: make(chan struct{}, 1), joined: joined, departed: map[string]string{}}
}

// memberChanged is the gossip's OnMember: it notes departures for the
// status page and wakes the reconciliation.
func (r *Replica) memberChanged(ev loadsync.MemberEvent) {
	m := r.members
	m.mu.Lock()
	if ev.Kind == loadsync.MemberLeft {
		m.departed[ev.Member.Name] = ev.Member.State
	} else {
		delete(m.departed, ev.Member.Name)
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// departedState is how a replica that is not a live member went away:
// "left", "dead", or "unknown" when this replica never saw it.
func (m *membership) departedState(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.departed[name]; ok {
		return st
	}
	return "unknown"
}

// runMembership reconciles at every membership event, every leadership
// change and every ReconcileInterval, until the replica stops.
func (r *Replica) runMembership() {
	tick := time.NewTicker(r.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		leaderChanged := r.raft.LeaderChanges()
		r.reconcileMembership()
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		case <-r.members.kick:
		case <-leaderChanged:
		}
	}
}

// reconcileMembership is one round: bootstrap when this replica is the one
// to, announce when it has joined, and, on the leader, bring the Raft
// configuration in line with the gossip membership.
func (r *Replica) reconcileMembership() {
	ctx, cancel := context.WithTimeout(r.ctx, membershipTimeout)
	defer cancel()
	servers, err := r.raft.Servers(ctx)
	if err != nil {
		r.log.Debug("membership: cannot read the raft configuration", "err", err)
		return
	}
	if !r.members.joined {
		if len(servers) == 0 {
			r.maybeBootstrap(ctx)
			return
		}
		r.announceJoined()
	}
	if !r.raft.IsLeader() {
		r.members.missing = nil // a later leadership starts its clocks afresh
		return
	}
	live := liveRaftAddrs(r.gossip.Members())
	now := time.Now()
	r.members.missing = trackMissing(r.members.missing, r.cfg.NodeName, servers, live, now)
	for _, c := range planMembership(r.cfg.NodeName, r.cfg.BootstrapExpect, servers, live, r.members.missing, now, r.cfg.ReapTimeout) {
		r.changeMembership(ctx, c)
	}
}

// maybeBootstrap bootstraps the Raft cluster when --bootstrap-expect
// replicas have found each other and this one is the lowest-named of them.
func (r *Replica) maybeBootstrap(ctx context.Context) {
	if r.cfg.BootstrapExpect < 2 {
		return // alone it bootstrapped at start; with --join it waits to be added
	}
	voters := bootstrapVoters(r.cfg.NodeName, r.cfg.BootstrapExpect, r.gossip.Members())
	if voters == nil {
		return
	}
	err := r.raft.BootstrapCluster(ctx, voters)
	if err != nil && !errors.Is(err, ErrAlreadyBootstrapped) {
		r.log.Warn("membership: bootstrap failed; will retry", "err", err)
		return
	}
	r.log.Info("membership: bootstrapped the raft cluster", "voters", serverIDs(voters))
}

// announceJoined tells the peers that this replica holds Raft state, so a
// replica started later with --bootstrap-expect joins the existing cluster
// instead of bootstrapping another.
func (r *Replica) announceJoined() {
	r.members.joined = true
	if err := r.gossip.SetTags(r.gossipTags(true)); err != nil {
		r.log.Debug("membership: announcing that this replica joined", "err", err)
	}
}

// changeOp is one kind of Raft configuration change.
type changeOp int

const (
	opAddNonvoter changeOp = iota // add a replica, or move a non-voter to a new address
	opAddVoter                    // promote a non-voter, or move a voter to a new address
	opRemove                      // remove a replica that stayed away past the reap timeout
)

// membershipChange is one change the leader makes to the Raft configuration.
type membershipChange struct {
	op       changeOp
	id, addr string
	why      string
}

func (r *Replica) changeMembership(ctx context.Context, c membershipChange) {
	var err error
	switch c.op {
	case opAddNonvoter:
		err = r.raft.AddNonvoter(ctx, c.id, c.addr)
	case opAddVoter:
		err = r.raft.AddVoter(ctx, c.id, c.addr)
	case opRemove:
		err = r.raft.RemoveServer(ctx, c.id)
	}
	if err != nil {
		r.log.Warn("membership: raft configuration change failed; will retry", "node", c.id, "change", c.why, "err", err)
		return
	}
	r.log.Info("membership: raft configuration changed", "node", c.id, "addr", c.addr, "change", c.why)
}

// bootstrapVoters returns the voters self should bootstrap the Raft cluster
// with, or nil when it should not: some member already holds Raft state (a
// cluster exists and its leader will add us), fewer than expect replicas
// announcing the same expect are known, or self is not the lowest-named of
// the first expect of them. Every replica that sees the same members picks
// the same set and only one of them bootstraps, so two clusters cannot form
// unless the members' views differ at that moment (start them with the same
// --join list).
func bootstrapVoters(self string, expect int, members []loadsync.Member) []RaftServer {
	var ready []loadsync.Member
	for _, m := range members {
		if m.Tags[tagJoined] == "1" {
			return nil
		}
		if m.Tags[tagExpect] == strconv.Itoa(expect) && m.Tags[tagRaft] != "" {
			ready = append(ready, m)
		}
	}
	if len(ready) < expect {
		return nil
	}
	slices.SortFunc(ready, func(a, b loadsync.Member) int { return strings.Compare(a.Name, b.Name) })
	ready = ready[:expect]
	if ready[0].Name != self {
		return nil
	}
	voters := make([]RaftServer, len(ready))
	for i, m := range ready {
		voters[i] = RaftServer{ID: m.Name, Addr: m.Tags[tagRaft], Suffrage: "voter"}
	}
	return voters
}

// liveRaftAddrs maps each live member that announced a Raft address to it.
func liveRaftAddrs(members []loadsync.Member) map[string]string {
	live := make(map[string]string, len(members))
	for _, m := range members {
		if addr := m.Tags[tagRaft]; addr != "" {
			live[m.Name] = addr
		}
	}
	return live
}

// trackMissing returns, for every Raft server but self that is not a live
// member, since when it has been missing: the time in prev, or now for a
// server newly missing.
func trackMissing(prev map[string]time.Time, self string, servers []RaftServer, live map[string]string, now time.Time) map[string]time.Time {
	next := make(map[string]time.Time)
	for _, s := range servers {
		if _, alive := live[s.ID]; alive || s.ID == self {
			continue
		}
		since, seen := prev[s.ID]
		if !seen {
			since = now
		}
		next[s.ID] = since
	}
	return next
}

// planMembership lists the changes that bring the Raft configuration in
// line with the live members, in order: remove servers missing for at least
// reap, re-address servers that came back at a new Raft address, add live
// members as non-voters (the tier grows without growing the quorum), and
// promote live non-voters while fewer than expect voters remain (a reaped
// voter's seat is refilled). Self is never removed.
func planMembership(self string, expect int, servers []RaftServer, live map[string]string,
	missing map[string]time.Time, now time.Time, reap time.Duration) []membershipChange {
	var plan []membershipChange
	voters := 0
	known := make(map[string]bool, len(servers))
	for _, s := range servers {
		known[s.ID] = true
		addr, alive := live[s.ID]
		since, isMissing := missing[s.ID]
		switch {
		case s.ID != self && !alive && isMissing && now.Sub(since) >= reap:
			plan = append(plan, membershipChange{op: opRemove, id: s.ID, why: "gone for " + now.Sub(since).Round(time.Second).String()})
			continue
		case alive && addr != s.Addr:
			op := opAddNonvoter
			if s.Suffrage == "voter" {
				op = opAddVoter
			}
			plan = append(plan, membershipChange{op: op, id: s.ID, addr: addr, why: "moved from " + s.Addr})
		}
		if s.Suffrage == "voter" {
			voters++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(live)) {
		if !known[name] {
			plan = append(plan, membershipChange{op: opAddNonvoter, id: name, addr: live[name], why: "joined"})
		}
	}
	for _, s := range sortedServers(servers) {
		if voters >= expect {
			break
		}
		if s.Suffrage != "voter" && live[s.ID] == s.Addr {
			plan = append(plan, membershipChange{op: opAddVoter, id: s.ID, addr: s.Addr, why: "promoted to refill the voters"})
			voters++
		}
	}
	return plan
}

func sortedServers(servers []RaftServer) []RaftServer {
	out := slices.Clone(servers)
	slices.SortFunc(out, func(a, b RaftServer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func serverIDs(servers []RaftServer) []string {
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = s.ID
	}
	return ids
}
