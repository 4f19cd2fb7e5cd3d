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
// that goroutine reads and writes joined and missing; departed and seen are
// also read by the status page and the rejoin loop, under mu.
type membership struct {
	kick   chan struct{} // capacity 1: "membership changed, look again"
	joined bool          // this replica holds Raft state and announced it
	// missing is, on the leader, since when each Raft server has been
	// absent from the gossip membership.
	missing map[string]time.Time

	mu sync.Mutex
	// departed is how each replica that is not a live member went away,
	// until it rejoins; at most maxDeparted entries, the oldest dropped.
	departed map[string]departure
	// seen is the last gossip address of every replica ever seen, for the
	// rejoin loop; at most maxDeparted names besides the live ones.
	seen map[string]string
}

// departure is how and when a replica stopped being a live member.
type departure struct {
	state string // "left" (it said goodbye) or "dead" (it stopped answering)
	addr  string // its last gossip address
	at    time.Time
}

// maxDeparted bounds the departed replicas remembered: enough for every
// replica of a large tier to restart at once, small enough that replicas
// coming and going under new names (autoscaled pods) cannot grow it.
const maxDeparted = 128

func newMembership(joined bool) *membership {
	return &membership{kick: make(chan struct{}, 1), joined: joined, departed: map[string]departure{},
		seen: map[string]string{}}
}

// tagLeaving is announced by a replica that is stopping, just before it
// leaves the gossip: memberlist does not tell its peers whether a member
// left or died, and this tag does.
const tagLeaving = "leaving"

// memberChanged is the gossip's OnMember: it notes departures for the
// status page and wakes the reconciliation.
func (r *Replica) memberChanged(ev loadsync.MemberEvent) {
	r.members.note(ev, time.Now())
	select {
	case r.members.kick <- struct{}{}:
	default:
	}
}

// note records a membership event.
func (m *membership) note(ev loadsync.MemberEvent, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := ev.Member.Name
	if ev.Member.Addr != "" {
		m.seen[name] = ev.Member.Addr
	}
	if ev.Kind != loadsync.MemberLeft {
		delete(m.departed, name)
		return
	}
	state := "dead"
	if ev.Member.Tags[tagLeaving] == "1" {
		state = "left"
	}
	m.departed[name] = departure{state: state, addr: ev.Member.Addr, at: now}
	m.boundDeparted()
}

// boundDeparted drops the oldest departures beyond maxDeparted, and the
// addresses of replicas neither live nor remembered as departed. Callers
// hold mu.
func (m *membership) boundDeparted() {
	for len(m.departed) > maxDeparted {
		oldest, at := "", time.Time{}
		for name, d := range m.departed {
			if oldest == "" || d.at.Before(at) {
				oldest, at = name, d.at
			}
		}
		delete(m.departed, oldest)
		delete(m.seen, oldest)
	}
}

// departedAs is how a replica that is not a live member went away ("left",
// "dead", or "unknown" when this replica never saw it) and its last gossip
// address ("" when unknown).
func (m *membership) departedAs(name string) (state, addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.departed[name]; ok {
		return d.state, d.addr
	}
	return "unknown", m.seen[name]
}

// expectsPeers reports whether this replica has peers to hear from: one
// it saw in the gossip, other than self, that did not leave.
func (m *membership) expectsPeers(self string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.seen {
		if d, gone := m.departed[name]; name != self && (!gone || d.state != "left") {
			return true
		}
	}
	return false
}

// departedCount is how many departed replicas are remembered.
func (m *membership) departedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.departed)
}

// lastAddrs returns the last known gossip address of each named replica
// this replica has seen.
func (m *membership) lastAddrs(names []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, n := range names {
		if a, ok := m.seen[n]; ok {
			out = append(out, a)
		}
	}
	return out
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
	live := liveRaftAddrs(r.gossiper().Members())
	now := time.Now()
	r.members.missing = trackMissing(r.members.missing, r.cfg.NodeName, servers, live, r.stillGossiping(now), now)
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
	voters := bootstrapVoters(r.cfg.NodeName, r.cfg.BootstrapExpect, r.gossiper().Members())
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
	if err := r.gossiper().SetTags(r.gossipTags(true)); err != nil {
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

// gossipingWithin is how recent a peer's last load report must be for the
// leader to count it as still gossiping, whatever memberlist's verdict on
// it: a replica that memberlist declared dead (it stalled, or only some of
// its packets get through) but whose reports still arrive is not reaped.
const gossipingWithin = 2 * time.Second

// stillGossiping is the set of peers whose load reports arrived within
// gossipingWithin.
func (r *Replica) stillGossiping(now time.Time) map[string]bool {
	out := map[string]bool{}
	for _, o := range r.sync.Origins(now) {
		if o.Age < gossipingWithin {
			out[o.Origin] = true
		}
	}
	return out
}

// trackMissing returns, for every Raft server but self that is neither a
// live member nor still gossiping, since when it has been missing: the time
// in prev, or now for a server newly missing.
func trackMissing(prev map[string]time.Time, self string, servers []RaftServer, live map[string]string,
	gossiping map[string]bool, now time.Time) map[string]time.Time {
	next := make(map[string]time.Time)
	for _, s := range servers {
		if _, alive := live[s.ID]; alive || gossiping[s.ID] || s.ID == self {
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
