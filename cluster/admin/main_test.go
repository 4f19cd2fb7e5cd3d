package admin

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/leaktest"
	"github.com/kvrouter/kvrouter/store"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// testDeadline bounds every wait in these tests; elections take about a
// second, and -race on a busy machine slows them down.
const testDeadline = 20 * time.Second

type testNode struct {
	*raftnode.Node
	fsm *store.FSM
	dir string
}

// loopbackRaft are Raft timings for tests: twice as fast as the defaults,
// so a lost leader is replaced in a second or two, and still slow enough
// that a test run sharing two cores with other packages' tests does not
// hold elections the test did not cause.
var loopbackRaft = raftnode.Timings{Heartbeat: 500 * time.Millisecond, Election: time.Second,
	LeaderLease: 500 * time.Millisecond, Commit: 20 * time.Millisecond}

func openNode(t *testing.T, id, dir, bind string, bootstrap bool) *testNode {
	t.Helper()
	fsm := store.NewFSM()
	n, err := raftnode.Open(raftnode.Config{NodeID: id, DataDir: dir, BindAddr: bind, Bootstrap: bootstrap,
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
