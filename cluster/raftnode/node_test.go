package raftnode_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/leaktest"
	"github.com/kvrouter/kvrouter/store"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// testDeadline bounds every wait in these tests.
const testDeadline = raftnodetest.Deadline

// waitRegistry waits until fsm's registry satisfies cond.
func waitRegistry(t *testing.T, fsm *store.FSM, what string, cond func(*store.Registry) bool) {
	t.Helper()
	deadline := time.NewTimer(testDeadline)
	defer deadline.Stop()
	for {
		reg, changed := fsm.Watch()
		if cond(reg) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; registry has %d workers at index %d", what, reg.Len(), reg.Index())
		}
	}
}

func addWorker(t *testing.T, n *raftnodetest.Node, url string) store.WorkerID {
	t.Helper()
	res, err := n.Apply(raftnodetest.Context(t), store.NewAddWorker(store.AddWorker{URL: url}))
	if err != nil {
		t.Fatalf("add %s: %v", url, err)
	}
	return res.ID
}

func TestOneNodeClusterRecoversRegistryAndIDCounterAfterRestart(t *testing.T) {
	dir := t.TempDir()
	n := raftnodetest.Open(t, "n1", dir, "127.0.0.1:0", true)
	if id, _ := raftnodetest.WaitLeader(t, n.Node); id != "n1" {
		t.Fatalf("leader = %q, want n1", id)
	}
	kept := addWorker(t, n, "http://w1:8000")
	removed := addWorker(t, n, "http://w2:8000")
	if _, err := n.Apply(raftnodetest.Context(t), store.NewRemoveWorker(removed)); err != nil {
		t.Fatal(err)
	}
	if err := n.Snapshot(raftnodetest.Context(t)); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	drained := addWorker(t, n, "http://w3:8000") // in the log after the snapshot
	if _, err := n.Apply(raftnodetest.Context(t), store.NewSetWorkerState(drained, store.StateDraining)); err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	again := raftnodetest.Open(t, "n1", dir, addr, true) // Bootstrap again must be a no-op
	raftnodetest.WaitLeader(t, again.Node)
	if err := again.Barrier(raftnodetest.Context(t)); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	reg := again.FSM.View()
	if w, ok := reg.Worker(kept); !ok || w.URL != "http://w1:8000" {
		t.Fatalf("worker %d after restart: %+v, %v", kept, w, ok)
	}
	if w, ok := reg.Worker(drained); !ok || w.State != store.StateDraining {
		t.Fatalf("worker %d after restart: %+v, %v", drained, w, ok)
	}
	if id := addWorker(t, again, "http://w4:8000"); id != 4 {
		t.Fatalf("first add after restart got id %d, want 4", id)
	}
	if servers, err := again.Servers(raftnodetest.Context(t)); err != nil || len(servers) != 1 {
		t.Fatalf("servers after restart: %+v, %v (a second bootstrap would be visible here)", servers, err)
	}
}

// openCluster starts three nodes on free loopback ports and bootstraps them
// with all three as voters, as --bootstrap-expect=3 does.
func openCluster(t *testing.T) []*raftnodetest.Node {
	t.Helper()
	nodes := make([]*raftnodetest.Node, 3)
	voters := make([]raftnode.Server, 3)
	for i := range nodes {
		nodes[i] = raftnodetest.Open(t, fmt.Sprintf("n%d", i+1), t.TempDir(), "127.0.0.1:0", false)
		voters[i] = raftnode.Server{ID: nodes[i].ID(), Addr: nodes[i].Addr()}
	}
	for _, n := range nodes {
		if err := n.BootstrapCluster(raftnodetest.Context(t), voters); err != nil {
			t.Fatalf("bootstrap %s: %v", n.ID(), err)
		}
	}
	return nodes
}

func leaderOf(t *testing.T, nodes []*raftnodetest.Node) (leader *raftnodetest.Node, followers []*raftnodetest.Node) {
	t.Helper()
	id, _ := raftnodetest.WaitLeader(t, nodes[0].Node)
	for _, n := range nodes {
		if n.ID() == id {
			leader = n
		} else {
			followers = append(followers, n)
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is not one of the nodes", id)
	}
	return leader, followers
}

func TestThreeNodeClusterReplicatesACommand(t *testing.T) {
	nodes := openCluster(t)
	leader, _ := leaderOf(t, nodes)
	id := addWorker(t, leader, "http://w1:8000")
	for _, n := range nodes {
		waitRegistry(t, n.FSM, "replication to "+n.ID(), func(r *store.Registry) bool {
			w, ok := r.Worker(id)
			return ok && w.URL == "http://w1:8000"
		})
	}
	servers, err := leader.Servers(raftnodetest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.Suffrage != "voter" || s.Leader != (s.ID == leader.ID()) {
			t.Fatalf("server %+v: want a voter, leader only for %s", s, leader.ID())
		}
	}
}

func TestApplyOnAFollowerReturnsNotLeaderErrorNamingTheLeader(t *testing.T) {
	nodes := openCluster(t)
	leader, followers := leaderOf(t, nodes)
	follower := followers[0]
	waitFollowerKnowsLeader(t, follower, leader.ID())

	_, err := follower.Apply(raftnodetest.Context(t), store.NewAddWorker(store.AddWorker{URL: "http://w1:8000"}))
	var nle *raftnode.NotLeaderError
	if !errors.As(err, &nle) {
		t.Fatalf("apply on follower: err = %v, want *NotLeaderError", err)
	}
	if nle.LeaderID != leader.ID() || nle.LeaderAddr != leader.Addr() {
		t.Fatalf("NotLeaderError names %s at %s, want %s at %s", nle.LeaderID, nle.LeaderAddr, leader.ID(), leader.Addr())
	}
	if follower.FSM.View().Len() != 0 {
		t.Fatal("a refused write reached the registry")
	}
}

func waitFollowerKnowsLeader(t *testing.T, n *raftnodetest.Node, leaderID string) {
	t.Helper()
	ctx := raftnodetest.Context(t)
	for {
		changed := n.LeaderChanges()
		if id, _ := n.Leader(); id == leaderID {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%s never learned leader %s", n.ID(), leaderID)
		}
	}
}

func TestApplyWithoutAnyLeaderReturnsErrNoLeader(t *testing.T) {
	n := raftnodetest.Open(t, "lonely", t.TempDir(), "127.0.0.1:0", false) // never bootstrapped
	_, err := n.Apply(raftnodetest.Context(t), store.NewRemoveWorker(1))
	if !errors.Is(err, raftnode.ErrNoLeader) {
		t.Fatalf("err = %v, want ErrNoLeader", err)
	}
}

func TestApplyRefusesAnInvalidCommandBeforeRaft(t *testing.T) {
	n := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", false)
	_, err := n.Apply(raftnodetest.Context(t), store.NewAddWorker(store.AddWorker{URL: "ftp://x:1"}))
	var fe *store.FieldError
	if !errors.As(err, &fe) || fe.Field != "url" {
		t.Fatalf("err = %v, want a FieldError for url", err)
	}
}

func TestApplyReturnsByItsDeadlineWhenTheQuorumIsGone(t *testing.T) {
	nodes := openCluster(t)
	leader, followers := leaderOf(t, nodes)
	addWorker(t, leader, "http://w1:8000")
	for _, f := range followers {
		f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := leader.Apply(ctx, store.NewAddWorker(store.AddWorker{URL: "http://w2:8000"}))
	elapsed := time.Since(start)
	if !errors.Is(err, raftnode.ErrTimeout) && !errors.Is(err, raftnode.ErrNoLeader) {
		t.Fatalf("err = %v, want ErrTimeout or ErrNoLeader", err)
	}
	if elapsed > 300*time.Millisecond+time.Second {
		t.Fatalf("apply took %v with a 300ms deadline", elapsed)
	}
}

func TestNonvoterReplicatesAndCanBeRemoved(t *testing.T) {
	leader := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, leader.Node)
	extra := raftnodetest.Open(t, "n2", t.TempDir(), "127.0.0.1:0", false)
	if err := extra.AddNonvoter(raftnodetest.Context(t), "n1", "127.0.0.1:1"); err == nil {
		t.Fatal("AddNonvoter on a node outside any cluster succeeded")
	}
	if err := leader.AddNonvoter(raftnodetest.Context(t), extra.ID(), extra.Addr()); err != nil {
		t.Fatalf("add nonvoter: %v", err)
	}
	id := addWorker(t, leader, "http://w1:8000")
	waitRegistry(t, extra.FSM, "replication to the nonvoter", func(r *store.Registry) bool {
		_, ok := r.Worker(id)
		return ok
	})
	servers, err := leader.Servers(raftnodetest.Context(t))
	if err != nil || len(servers) != 2 || servers[1].Suffrage != "nonvoter" {
		t.Fatalf("servers = %+v, %v; want n1 voter and n2 nonvoter", servers, err)
	}
	if err := leader.RemoveServer(raftnodetest.Context(t), extra.ID()); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if servers, _ := leader.Servers(raftnodetest.Context(t)); len(servers) != 1 {
		t.Fatalf("servers after removal = %+v", servers)
	}
}

func TestBootstrapClusterRefusesANodeWithState(t *testing.T) {
	n := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	err := n.BootstrapCluster(raftnodetest.Context(t), []raftnode.Server{{ID: "n1", Addr: n.Addr()}})
	if !errors.Is(err, raftnode.ErrAlreadyBootstrapped) {
		t.Fatalf("err = %v, want ErrAlreadyBootstrapped", err)
	}
}

func TestStatusReportsLeaderTermAndServers(t *testing.T) {
	n := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, n.Node)
	st, err := n.Status(raftnodetest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "leader" || st.LeaderID != "n1" || st.LeaderAddr != n.Addr() || st.Term == 0 ||
		len(st.Servers) != 1 || !st.Servers[0].Leader {
		t.Fatalf("status = %+v", st)
	}
}

func TestClosedNodeRefusesWrites(t *testing.T) {
	n := raftnodetest.Open(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, n.Node)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Apply(raftnodetest.Context(t), store.NewRemoveWorker(1)); !errors.Is(err, raftnode.ErrClosed) {
		t.Fatalf("apply after close: %v, want ErrClosed", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestOpenRaftRefusesConfigsPeersCouldNotUse(t *testing.T) {
	cases := map[string]struct {
		cfg     raftnode.Config
		mention string
	}{
		"no node id":    {raftnode.Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0"}, "--node-name"},
		"no data dir":   {raftnode.Config{NodeID: "n1", BindAddr: "127.0.0.1:0"}, "--data-dir"},
		"bad advertise": {raftnode.Config{NodeID: "n1", DataDir: t.TempDir(), BindAddr: "127.0.0.1:0", AdvertiseAddr: "nope"}, "--raft-advertise"},
		"unusable bind": {raftnode.Config{NodeID: "n1", DataDir: t.TempDir(), BindAddr: "127.0.0.1:x"}, "--raft-bind"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, err := raftnode.Open(tc.cfg, store.NewFSM())
			if err == nil {
				n.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want it to mention %s", err, tc.mention)
			}
		})
	}
}

// BenchmarkApplyOneNode measures a registry write through Raft on one node:
// encode, log append (a bbolt fsync), commit and FSM apply.
func BenchmarkApplyOneNode(b *testing.B) {
	fsm := store.NewFSM()
	n, err := raftnode.Open(raftnode.Config{NodeID: "n1", DataDir: b.TempDir(), BindAddr: "127.0.0.1:0", Bootstrap: true,
		Logger: slog.New(slog.DiscardHandler)}, fsm)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	if _, _, err := n.WaitForLeader(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := n.Apply(ctx, store.NewAddWorker(store.AddWorker{URL: "http://w:1"}))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		state := store.StateActive
		if i%2 == 0 {
			state = store.StateDraining
		}
		if _, err := n.Apply(ctx, store.NewSetWorkerState(res.ID, state)); err != nil {
			b.Fatal(err)
		}
	}
}
