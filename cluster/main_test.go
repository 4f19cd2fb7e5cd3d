package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// testDeadline bounds every wait in these tests; elections take about a
// second, and -race on a busy machine slows them down.
const testDeadline = 20 * time.Second

// loopbackRaft are Raft timings for tests: twice as fast as the defaults,
// so a lost leader is replaced in a second or two, and still slow enough
// that a test run sharing two cores with other packages' tests does not
// hold elections the test did not cause.
var loopbackRaft = raftnode.Timings{Heartbeat: 500 * time.Millisecond, Election: time.Second,
	LeaderLease: 500 * time.Millisecond, Commit: 20 * time.Millisecond}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}
