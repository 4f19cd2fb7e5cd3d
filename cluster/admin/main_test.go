package admin

import (
	"testing"

	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// testDeadline bounds every wait in these tests.
const testDeadline = raftnodetest.Deadline
