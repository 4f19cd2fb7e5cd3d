package cluster

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/admission"
)

// Status is the answer of GET /cluster/status.
type Status struct {
	Node      string       `json:"node"`
	Members   []Member     `json:"members"`
	Leader    string       `json:"leader"`
	Term      uint64       `json:"term"`
	Voters    []string     `json:"voters"`
	Nonvoters []string     `json:"nonvoters"`
	Peers     []PeerStatus `json:"peers"`
	Workers   int          `json:"workers"`
	// Admission is the door's queue: per class, and the busiest tenants.
	Admission *admission.Stats `json:"admission,omitempty"`
}

// Member is one replica: a live gossip member, or a member of the Raft
// configuration that is not (yet, or any more) a live gossip member.
type Member struct {
	Name string `json:"name"`
	// Address is its gossip address, the last one known for a replica
	// that is not live; empty for one this replica never saw.
	Address string `json:"address"`
	// State is "alive", "left" (it said goodbye), "dead" (it stopped
	// answering) or "unknown" (in the Raft configuration, never seen here).
	State       string `json:"state"`
	RaftAddress string `json:"raft_address,omitempty"`
	APIAddress  string `json:"api_address,omitempty"`
	// Suffrage is "voter" or "nonvoter" in the Raft configuration; empty
	// for a live replica the leader has not added yet.
	Suffrage string `json:"suffrage,omitempty"`
}

// PeerStatus is how fresh another replica's load report is.
type PeerStatus struct {
	Name string `json:"name"`
	// LastReportAge is how long ago its last load report arrived, in
	// seconds; -1 when none has.
	LastReportAge float64 `json:"last_report_age_seconds"`
	// LastLag is that report's receive time minus its send time, in
	// seconds (meaningful when the clocks agree).
	LastLag float64 `json:"last_lag_seconds"`
}

func (r *Replica) status() Status {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	leader, _ := r.raft.Leader()
	st := Status{Node: r.cfg.NodeName, Leader: leader, Term: r.raft.Term(), Workers: r.fsm.View().Len(),
		Members: []Member{}, Voters: []string{}, Nonvoters: []string{}, Peers: []PeerStatus{}}
	servers, _ := r.raft.Servers(ctx)
	suffrage := make(map[string]RaftServer, len(servers))
	for _, s := range servers {
		suffrage[s.ID] = s
		if s.Suffrage == "voter" {
			st.Voters = append(st.Voters, s.ID)
		} else {
			st.Nonvoters = append(st.Nonvoters, s.ID)
		}
	}
	st.Members = r.statusMembers(servers, suffrage)
	st.Peers = r.peerStatus()
	if r.proxy != nil {
		a := r.proxy.AdmissionStats()
		st.Admission = &a
	}
	return st
}

// statusMembers merges the live gossip members with the Raft servers.
func (r *Replica) statusMembers(servers []RaftServer, suffrage map[string]RaftServer) []Member {
	var out []Member
	live := map[string]bool{}
	for _, m := range r.gossiper().Members() {
		live[m.Name] = true
		out = append(out, Member{Name: m.Name, Address: m.Addr, State: "alive", RaftAddress: m.Tags[tagRaft],
			APIAddress: m.Tags[tagAPI], Suffrage: suffrage[m.Name].Suffrage})
	}
	for _, s := range servers {
		if !live[s.ID] {
			state, addr := r.members.departedAs(s.ID)
			out = append(out, Member{Name: s.ID, Address: addr, State: state, RaftAddress: s.Addr, Suffrage: s.Suffrage})
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// peerStatus lists every other live member with the freshness of its load
// reports.
func (r *Replica) peerStatus() []PeerStatus {
	reports := map[string]PeerStatus{}
	for _, o := range r.sync.Origins(time.Now()) {
		reports[o.Origin] = PeerStatus{Name: o.Origin, LastReportAge: o.Age.Seconds(), LastLag: o.LastLag.Seconds()}
	}
	out := []PeerStatus{}
	for _, m := range r.gossiper().Members() {
		if m.Self {
			continue
		}
		p, ok := reports[m.Name]
		if !ok {
			p = PeerStatus{Name: m.Name, LastReportAge: -1, LastLag: -1}
		}
		out = append(out, p)
	}
	return out
}
