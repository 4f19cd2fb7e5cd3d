package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/loadsync"
)

// cutGossip partitions r off the gossip: its memberlist node is killed
// without a leave, as if the network dropped every packet, so the peers
// declare it dead. Raft and the API stay up. reopen starts a new memberlist
// node at the same address over the same state, joining nobody, as a
// replica that sat out a partition comes back to a healed network: it
// knows nobody live, and only the rejoin loop brings it back.
func cutGossip(t *testing.T, r *Replica) (reopen func()) {
	t.Helper()
	old := r.gossip.current()
	addr := r.GossipAddr()
	if err := old.Kill(); err != nil {
		t.Fatalf("cutting %s off the gossip: %v", r.cfg.NodeName, err)
	}
	return func() {
		t.Helper()
		g, err := loadsync.Start(loadsync.GossipConfig{BindAddr: addr, SecretKey: r.cfg.GossipKey,
			OnMember: r.members.MemberChanged, LocalNetwork: r.cfg.GossipLocal}, r.sync, clock.RealClock{})
		if err != nil {
			t.Fatalf("reopening %s's gossip at %s: %v", r.cfg.NodeName, addr, err)
		}
		r.gossip.node.Store(g)
	}
}

// liveNames are the members r's gossip sees live, itself included.
func liveNames(r *Replica) []string {
	var out []string
	for _, m := range r.gossip.current().Members() {
		out = append(out, m.Name)
	}
	return out
}

// waitConverged waits until every live replica sees exactly the live
// replicas as gossip members and all of them in its Raft configuration.
func (c *testCluster) waitConverged(what string) {
	c.t.Helper()
	var names []string
	for n := range c.replicas {
		names = append(names, n)
	}
	slices.Sort(names)
	for name, r := range c.replicas {
		testwait.Eventually(c.t, testDeadline, func() bool {
			if !slices.Equal(liveNames(r), names) {
				return false
			}
			servers, err := r.raft.Servers(context.Background())
			return err == nil && len(servers) == len(names)
		}, "%s: %s", name, what)
	}
}

// statusOf is r's /cluster/status.
func (c *testCluster) statusOf(r *Replica) adminapi.Status {
	c.t.Helper()
	var st adminapi.Status
	rep := c.get(r, "/cluster/status")
	if rep.Status != http.StatusOK {
		c.t.Fatalf("status: %d %s", rep.Status, rep.Body)
	}
	decodeInto(c.t, rep.Body, &st)
	return st
}

func memberNamed(st adminapi.Status, name string) (adminapi.Member, bool) {
	for _, m := range st.Members {
		if m.Name == name {
			return m, true
		}
	}
	return adminapi.Member{}, false
}

func decodeInto(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
}
