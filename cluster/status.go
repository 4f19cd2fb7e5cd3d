package cluster

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
)

func (v *adminViews) status() adminapi.Status {
	ctx, cancel := context.WithTimeout(v.ctx, 2*time.Second)
	defer cancel()
	leader, _ := v.raft.Leader()
	st := adminapi.Status{Node: v.node, Leader: leader, Term: v.raft.Term(), Workers: v.fsm.View().Len(),
		Members: []adminapi.Member{}, Voters: []string{}, Nonvoters: []string{}, Peers: []adminapi.PeerStatus{}}
	servers, _ := v.raft.Servers(ctx)
	suffrage := make(map[string]raftnode.Server, len(servers))
	for _, s := range servers {
		suffrage[s.ID] = s
		if s.Suffrage == "voter" {
			st.Voters = append(st.Voters, s.ID)
		} else {
			st.Nonvoters = append(st.Nonvoters, s.ID)
		}
	}
	st.Members = v.statusMembers(servers, suffrage)
	st.Peers = v.peerStatus()
	if v.proxy != nil {
		a := v.proxy.AdmissionStats()
		st.Admission = &a
	}
	return st
}

// statusMembers merges the live gossip members with the Raft servers.
func (v *adminViews) statusMembers(servers []raftnode.Server, suffrage map[string]raftnode.Server) []adminapi.Member {
	var out []adminapi.Member
	live := map[string]bool{}
	for _, m := range v.gossip().Members() {
		live[m.Name] = true
		out = append(out, adminapi.Member{Name: m.Name, Address: m.Addr, State: "alive", RaftAddress: m.Tags[tagRaft],
			APIAddress: m.Tags[tagAPI], Suffrage: suffrage[m.Name].Suffrage, Release: m.Release})
	}
	for _, s := range servers {
		if !live[s.ID] {
			state, addr := v.members.DepartedAs(s.ID)
			out = append(out, adminapi.Member{Name: s.ID, Address: addr, State: state, RaftAddress: s.Addr, Suffrage: s.Suffrage})
		}
	}
	slices.SortFunc(out, func(a, b adminapi.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// peerStatus lists every other live member with the freshness of its load
// reports.
func (v *adminViews) peerStatus() []adminapi.PeerStatus {
	reports := map[string]adminapi.PeerStatus{}
	for _, o := range v.sync.Origins(time.Now()) {
		reports[o.Origin] = adminapi.PeerStatus{Name: o.Origin, LastReportAge: o.Age.Seconds(), LastLag: o.LastLag.Seconds()}
	}
	out := []adminapi.PeerStatus{}
	for _, m := range v.gossip().Members() {
		if m.Self {
			continue
		}
		p, ok := reports[m.Name]
		if !ok {
			p = adminapi.PeerStatus{Name: m.Name, LastReportAge: -1, LastLag: -1}
		}
		out = append(out, p)
	}
	return out
}
