package cluster

import (
	"context"
	"time"
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
}

// Member is one replica as membership sees it.
type Member struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	State   string `json:"state"`
}

// PeerStatus is how fresh another replica's load report is.
type PeerStatus struct {
	Name          string  `json:"name"`
	LastReportAge float64 `json:"last_report_age_seconds"`
}

func (r *Replica) status() Status {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	leader, _ := r.raft.Leader()
	st := Status{Node: r.cfg.NodeName, Leader: leader, Term: r.raft.Term(), Workers: r.fsm.View().Len(),
		Voters: []string{}, Nonvoters: []string{}, Peers: []PeerStatus{}}
	servers, _ := r.raft.Servers(ctx)
	for _, s := range servers {
		if s.Suffrage == "voter" {
			st.Voters = append(st.Voters, s.ID)
		} else {
			st.Nonvoters = append(st.Nonvoters, s.ID)
		}
		st.Members = append(st.Members, Member{Name: s.ID, Address: s.Addr, State: "alive"})
	}
	return st
}
