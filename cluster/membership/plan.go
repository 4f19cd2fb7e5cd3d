package membership

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// Op is one kind of Raft configuration change.
type Op int

const (
	// OpAddNonvoter adds a replica, or moves a non-voter to a new address.
	OpAddNonvoter Op = iota
	// OpAddVoter promotes a non-voter, or moves a voter to a new address.
	OpAddVoter
	// OpRemove removes a replica that stayed away past the reap timeout.
	OpRemove
)

// Change is one change the leader makes to the Raft configuration.
type Change struct {
	Op       Op
	ID, Addr string
	// Why says what led to it, for the log.
	Why string
}

// Observed is what the planner knows at one moment: the Raft servers, the
// live members' Raft addresses, since when each absent server has been
// missing (TrackMissing) and since when each live server has been live at
// its address (TrackStable).
type Observed struct {
	Servers []Server
	Live    map[string]string
	Missing map[string]time.Time
	Stable  map[string]time.Time
	Now     time.Time
}

// Plan lists the changes that bring the Raft configuration in line with
// the live members, in order: remove servers missing for at least
// cfg.ReapTimeout, re-address servers that came back at a new Raft address,
// add live members as non-voters (the tier grows without growing the
// quorum), and promote live non-voters that have been stable for
// cfg.Stabilization while fewer than cfg.Expect voters remain (a reaped
// voter's seat is refilled, by a replica that has proven itself, not one
// that appeared a moment ago). cfg.Self is never removed.
func Plan(cfg Config, o Observed) []Change {
	cfg = cfg.withDefaults()
	var plan []Change
	voters := 0
	known := make(map[string]bool, len(o.Servers))
	for _, s := range o.Servers {
		known[s.ID] = true
		addr, alive := o.Live[s.ID]
		since, isMissing := o.Missing[s.ID]
		switch {
		case s.ID != cfg.Self && !alive && isMissing && o.Now.Sub(since) >= cfg.ReapTimeout:
			plan = append(plan, Change{Op: OpRemove, ID: s.ID, Why: "gone for " + o.Now.Sub(since).Round(time.Second).String()})
			continue
		case alive && addr != s.Addr:
			op := OpAddNonvoter
			if s.Suffrage == Voter {
				op = OpAddVoter
			}
			plan = append(plan, Change{Op: op, ID: s.ID, Addr: addr, Why: "moved from " + s.Addr})
		}
		if s.Suffrage == Voter {
			voters++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.Live)) {
		if !known[name] {
			plan = append(plan, Change{Op: OpAddNonvoter, ID: name, Addr: o.Live[name], Why: "joined"})
		}
	}
	for _, s := range sortedServers(o.Servers) {
		if voters >= cfg.Expect {
			break
		}
		if s.Suffrage != Voter && o.Live[s.ID] == s.Addr && stableFor(o, s.ID) >= cfg.Stabilization {
			plan = append(plan, Change{Op: OpAddVoter, ID: s.ID, Addr: s.Addr, Why: "promoted to refill the voters"})
			voters++
		}
	}
	return plan
}

// stableFor is how long server id has been live at its address, 0 when it
// is not.
func stableFor(o Observed, id string) time.Duration {
	since, ok := o.Stable[id]
	if !ok {
		return 0
	}
	return o.Now.Sub(since)
}

// TrackMissing returns, for every Raft server but self that is neither a
// live member nor still gossiping, since when it has been missing: the time
// in prev, or now for a server newly missing.
func TrackMissing(prev map[string]time.Time, self string, servers []Server, live map[string]string,
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

// TrackStable returns, for every Raft server live at the address the
// configuration holds for it, since when it has been: the time in prev, or
// now for one newly so. A server that went away or moved starts afresh.
func TrackStable(prev map[string]time.Time, servers []Server, live map[string]string, now time.Time) map[string]time.Time {
	next := make(map[string]time.Time)
	for _, s := range servers {
		if addr, alive := live[s.ID]; !alive || addr != s.Addr {
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

// BootstrapVoters returns the voters self should bootstrap the Raft cluster
// with, or nil when it should not: some member already holds Raft state (a
// cluster exists and its leader will add us), fewer than expect replicas
// announcing the same expect are known, or self is not the lowest-named of
// the first expect of them. Every replica that sees the same members picks
// the same set and only one of them bootstraps, so two clusters cannot form
// unless the members' views differ at that moment (start them with the same
// --join list).
func BootstrapVoters(self string, expect int, members []loadsync.Member) []Server {
	var ready []loadsync.Member
	for _, m := range members {
		if m.Tags[TagJoined] == "1" {
			return nil
		}
		if m.Tags[TagExpect] == strconv.Itoa(expect) && m.Tags[TagRaft] != "" {
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
	voters := make([]Server, len(ready))
	for i, m := range ready {
		voters[i] = Server{ID: m.Name, Addr: m.Tags[TagRaft], Suffrage: Voter}
	}
	return voters
}

// LiveRaftAddrs maps each live member that announced a Raft address to it.
func LiveRaftAddrs(members []loadsync.Member) map[string]string {
	live := make(map[string]string, len(members))
	for _, m := range members {
		if addr := m.Tags[TagRaft]; addr != "" {
			live[m.Name] = addr
		}
	}
	return live
}

func sortedServers(servers []Server) []Server {
	out := slices.Clone(servers)
	slices.SortFunc(out, func(a, b Server) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ServerIDs lists the servers' ids.
func ServerIDs(servers []Server) []string {
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = s.ID
	}
	return ids
}
