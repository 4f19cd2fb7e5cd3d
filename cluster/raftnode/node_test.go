package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/leaktest"

	"github.com/kvrouter/kvrouter/store"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// testDeadline bounds every wait in these tests; elections take about a
// second, and -race on a busy machine slows them down.
const testDeadline = 20 * time.Second

type testNode struct {
	*Node
	fsm *store.FSM
	dir string
}

// loopbackRaft are Raft timings for tests: twice as fast as the defaults,
// so a lost leader is replaced in a second or two, and still slow enough
// that a test run sharing two cores with other packages' tests does not
// hold elections the test did not cause.
var loopbackRaft = Timings{Heartbeat: 500 * time.Millisecond, Election: time.Second,
	LeaderLease: 500 * time.Millisecond, Commit: 20 * time.Millisecond}

func openNode(t *testing.T, id, dir, bind string, bootstrap bool) *testNode {
	t.Helper()
	fsm := store.NewFSM()
	n, err := Open(Config{NodeID: id, DataDir: dir, BindAddr: bind, Bootstrap: bootstrap,
		Timings: loopbackRaft, Logger: slog.New(slog.DiscardHandler)}, fsm)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	t.Cleanup(func() { n.Close() })
	return &testNode{Node: n, fsm: fsm, dir: dir}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

func waitLeader(t *testing.T, n *testNode) (id, addr string) {
	t.Helper()
	id, addr, err := n.WaitForLeader(testContext(t))
	if err != nil {
		t.Fatalf("%s: no leader: %v", n.ID(), err)
	}
	return id, addr
}

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

func addWorker(t *testing.T, n *testNode, url string) store.WorkerID {
	t.Helper()
	res, err := n.Apply(testContext(t), store.NewAddWorker(store.AddWorker{URL: url}))
	if err != nil {
		t.Fatalf("add %s: %v", url, err)
	}
	return res.ID
}

func TestOneNodeClusterRecoversRegistryAndIDCounterAfterRestart(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, "n1", dir, "127.0.0.1:0", true)
	if id, _ := waitLeader(t, n); id != "n1" {
		t.Fatalf("leader = %q, want n1", id)
	}
	kept := addWorker(t, n, "http://w1:8000")
	removed := addWorker(t, n, "http://w2:8000")
	if _, err := n.Apply(testContext(t), store.NewRemoveWorker(removed)); err != nil {
		t.Fatal(err)
	}
	if err := n.Snapshot(testContext(t)); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	drained := addWorker(t, n, "http://w3:8000") // in the log after the snapshot
	if _, err := n.Apply(testContext(t), store.NewSetWorkerState(drained, store.StateDraining)); err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	again := openNode(t, "n1", dir, addr, true) // Bootstrap again must be a no-op
	waitLeader(t, again)
	if err := again.Barrier(testContext(t)); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	reg := again.fsm.View()
	if w, ok := reg.Worker(kept); !ok || w.URL != "http://w1:8000" {
		t.Fatalf("worker %d after restart: %+v, %v", kept, w, ok)
	}
	if w, ok := reg.Worker(drained); !ok || w.State != store.StateDraining {
		t.Fatalf("worker %d after restart: %+v, %v", drained, w, ok)
	}
	if id := addWorker(t, again, "http://w4:8000"); id != 4 {
		t.Fatalf("first add after restart got id %d, want 4", id)
	}
	if servers, err := again.Servers(testContext(t)); err != nil || len(servers) != 1 {
		t.Fatalf("servers after restart: %+v, %v (a second bootstrap would be visible here)", servers, err)
	}
}

// openCluster starts three nodes on free loopback ports and bootstraps them
// with all three as voters, as --bootstrap-expect=3 does.
func openCluster(t *testing.T) []*testNode {
	t.Helper()
	nodes := make([]*testNode, 3)
	voters := make([]Server, 3)
	for i := range nodes {
		nodes[i] = openNode(t, fmt.Sprintf("n%d", i+1), t.TempDir(), "127.0.0.1:0", false)
		voters[i] = Server{ID: nodes[i].ID(), Addr: nodes[i].Addr()}
	}
	for _, n := range nodes {
		if err := n.BootstrapCluster(testContext(t), voters); err != nil {
			t.Fatalf("bootstrap %s: %v", n.ID(), err)
		}
	}
	return nodes
}

func leaderOf(t *testing.T, nodes []*testNode) (leader *testNode, followers []*testNode) {
	t.Helper()
	id, _ := waitLeader(t, nodes[0])
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
		waitRegistry(t, n.fsm, "replication to "+n.ID(), func(r *store.Registry) bool {
			w, ok := r.Worker(id)
			return ok && w.URL == "http://w1:8000"
		})
	}
	servers, err := leader.Servers(testContext(t))
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

	_, err := follower.Apply(testContext(t), store.NewAddWorker(store.AddWorker{URL: "http://w1:8000"}))
	var nle *NotLeaderError
	if !errors.As(err, &nle) {
		t.Fatalf("apply on follower: err = %v, want *NotLeaderError", err)
	}
	if nle.LeaderID != leader.ID() || nle.LeaderAddr != leader.Addr() {
		t.Fatalf("NotLeaderError names %s at %s, want %s at %s", nle.LeaderID, nle.LeaderAddr, leader.ID(), leader.Addr())
	}
	if follower.fsm.View().Len() != 0 {
		t.Fatal("a refused write reached the registry")
	}
}

func waitFollowerKnowsLeader(t *testing.T, n *testNode, leaderID string) {
	t.Helper()
	ctx := testContext(t)
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
	n := openNode(t, "lonely", t.TempDir(), "127.0.0.1:0", false) // never bootstrapped
	_, err := n.Apply(testContext(t), store.NewRemoveWorker(1))
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err = %v, want ErrNoLeader", err)
	}
}

func TestApplyRefusesAnInvalidCommandBeforeRaft(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", false)
	_, err := n.Apply(testContext(t), store.NewAddWorker(store.AddWorker{URL: "ftp://x:1"}))
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
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err = %v, want ErrTimeout or ErrNoLeader", err)
	}
	if elapsed > 300*time.Millisecond+time.Second {
		t.Fatalf("apply took %v with a 300ms deadline", elapsed)
	}
}

func TestNonvoterReplicatesAndCanBeRemoved(t *testing.T) {
	leader := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, leader)
	extra := openNode(t, "n2", t.TempDir(), "127.0.0.1:0", false)
	if err := extra.AddNonvoter(testContext(t), "n1", "127.0.0.1:1"); err == nil {
		t.Fatal("AddNonvoter on a node outside any cluster succeeded")
	}
	if err := leader.AddNonvoter(testContext(t), extra.ID(), extra.Addr()); err != nil {
		t.Fatalf("add nonvoter: %v", err)
	}
	id := addWorker(t, leader, "http://w1:8000")
	waitRegistry(t, extra.fsm, "replication to the nonvoter", func(r *store.Registry) bool {
		_, ok := r.Worker(id)
		return ok
	})
	servers, err := leader.Servers(testContext(t))
	if err != nil || len(servers) != 2 || servers[1].Suffrage != "nonvoter" {
		t.Fatalf("servers = %+v, %v; want n1 voter and n2 nonvoter", servers, err)
	}
	if err := leader.RemoveServer(testContext(t), extra.ID()); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if servers, _ := leader.Servers(testContext(t)); len(servers) != 1 {
		t.Fatalf("servers after removal = %+v", servers)
	}
}

func TestBootstrapClusterRefusesANodeWithState(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	err := n.BootstrapCluster(testContext(t), []Server{{ID: "n1", Addr: n.Addr()}})
	if !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("err = %v, want ErrAlreadyBootstrapped", err)
	}
}

func TestStatusReportsLeaderTermAndServers(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, n)
	st, err := n.Status(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "leader" || st.LeaderID != "n1" || st.LeaderAddr != n.Addr() || st.Term == 0 ||
		len(st.Servers) != 1 || !st.Servers[0].Leader {
		t.Fatalf("status = %+v", st)
	}
}

func TestClosedNodeRefusesWrites(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Apply(testContext(t), store.NewRemoveWorker(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("apply after close: %v, want ErrClosed", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestOpenRaftRefusesConfigsPeersCouldNotUse(t *testing.T) {
	cases := map[string]struct {
		cfg     Config
		mention string
	}{
		"no node id":    {Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0"}, "--node-name"},
		"no data dir":   {Config{NodeID: "n1", BindAddr: "127.0.0.1:0"}, "--data-dir"},
		"bad advertise": {Config{NodeID: "n1", DataDir: t.TempDir(), BindAddr: "127.0.0.1:0", AdvertiseAddr: "nope"}, "--raft-advertise"},
		"unusable bind": {Config{NodeID: "n1", DataDir: t.TempDir(), BindAddr: "127.0.0.1:x"}, "--raft-bind"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, err := Open(tc.cfg, store.NewFSM())
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

func TestAWildcardBindNeedsAnAdvertiseAddress(t *testing.T) {
	// Checked on the pure function: these addresses are never bound here.
	for _, bind := range []string{"0.0.0.0:7000", ":7000", "[::]:7000"} {
		if _, err := advertiseAddr(Config{BindAddr: bind}); err == nil || !strings.Contains(err.Error(), "--raft-advertise") {
			t.Errorf("bind %s without advertise: err = %v", bind, err)
		}
		if addr, err := advertiseAddr(Config{BindAddr: bind, AdvertiseAddr: "127.0.0.1:7000"}); err != nil || addr.String() != "127.0.0.1:7000" {
			t.Errorf("bind %s with advertise: %v, %v", bind, addr, err)
		}
	}
	// A name stays a name, so a replica that comes back at another IP keeps
	// its Raft address.
	if addr, err := advertiseAddr(Config{BindAddr: "0.0.0.0:7000", AdvertiseAddr: "localhost:7000"}); err != nil || addr.String() != "localhost:7000" {
		t.Fatalf("advertising a name: %v %v, want localhost:7000", addr, err)
	}
	if addr, err := advertiseAddr(Config{BindAddr: "127.0.0.1:7000"}); err != nil || addr != nil {
		t.Errorf("loopback bind: %v, %v; want the bound address (nil)", addr, err)
	}
}

// BenchmarkApplyOneNode measures a registry write through Raft on one node:
// encode, log append (a bbolt fsync), commit and FSM apply.
func BenchmarkApplyOneNode(b *testing.B) {
	fsm := store.NewFSM()
	n, err := Open(Config{NodeID: "n1", DataDir: b.TempDir(), BindAddr: "127.0.0.1:0", Bootstrap: true,
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
