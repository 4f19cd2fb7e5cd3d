// Package raftnodetest opens Raft nodes on loopback ports with timings fit
// for tests, for the tests of the Raft node and of what runs on it. Only
// tests may import it (cluster/admin/admintest checks that).
package raftnodetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/store"
)

// Deadline bounds every wait in these tests; elections take about a
// second, and -race on a busy machine slows them down.
const Deadline = 20 * time.Second

// LoopbackTimings are Raft timings for tests: twice as fast as the
// defaults, so a lost leader is replaced in a second or two, and still slow
// enough that a test run sharing two cores with other packages' tests does
// not hold elections the test did not cause.
var LoopbackTimings = raftnode.Timings{Heartbeat: 500 * time.Millisecond, Election: time.Second,
	LeaderLease: 500 * time.Millisecond, Commit: 20 * time.Millisecond}

// Node is an open Raft node with the FSM it applies to and its data dir.
type Node struct {
	*raftnode.Node
	FSM *store.FSM
	Dir string
}

// Open opens node id on a fresh FSM with LoopbackTimings and a silent
// logger, bound at bind with its state in dir; bootstrap makes it a
// one-node cluster. The node is closed when the test ends.
func Open(t testing.TB, id, dir, bind string, bootstrap bool) *Node {
	t.Helper()
	fsm := store.NewFSM()
	n, err := raftnode.Open(raftnode.Config{NodeID: id, DataDir: dir, BindAddr: bind, Bootstrap: bootstrap,
		Timings: LoopbackTimings, Logger: slog.New(slog.DiscardHandler)}, fsm)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	t.Cleanup(func() { n.Close() })
	return &Node{Node: n, FSM: fsm, Dir: dir}
}

// Context is a context that ends after Deadline or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	t.Cleanup(cancel)
	return ctx
}

// WaitLeader waits until n knows a leader and returns it, failing the test
// after Deadline.
func WaitLeader(t testing.TB, n *raftnode.Node) (id, addr string) {
	t.Helper()
	id, addr, err := n.WaitForLeader(Context(t))
	if err != nil {
		t.Fatalf("%s: no leader: %v", n.ID(), err)
	}
	return id, addr
}
