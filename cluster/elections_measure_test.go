package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
)

// TestMeasureElections runs a 3-replica cluster on a host kept busy by four
// CPU-bound processes (two per core on the 2-core machines this is tuned
// for) for CLUSTER_MEASURE_MINUTES (default 5) per set of Raft timings, the
// old hard-coded ones and the defaults, and prints the elections per hour
// each had: the rise of the Raft term, summed over the window. It is
// skipped unless CLUSTER_MEASURE_ELECTIONS=1.
func TestMeasureElections(t *testing.T) {
	if os.Getenv("CLUSTER_MEASURE_ELECTIONS") != "1" {
		t.Skip("set CLUSTER_MEASURE_ELECTIONS=1 to count Raft elections under CPU load")
	}
	minutes, _ := strconv.Atoi(os.Getenv("CLUSTER_MEASURE_MINUTES"))
	window := time.Duration(max(minutes, 1)) * time.Minute
	if minutes == 0 {
		window = 5 * time.Minute
	}
	for _, tc := range []struct {
		name    string
		timings raftnode.Timings
	}{
		{"old 500/500/250/20 ms", raftnodetest.LoopbackTimings},
		{"defaults 1s/2s/1s/50ms", raftnode.Timings{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stopLoad := burnCPU(t, 4)
			defer stopLoad()
			c := newTestCluster(t, 2)
			c.startN(3, func(cfg *Config) { cfg.RaftTimings = tc.timings })
			c.waitReady()
			start := c.leader().raft.Term()
			deadline := time.Now().Add(window)
			for time.Now().Before(deadline) {
				// Some traffic too: registry reads and routing.
				for _, r := range c.replicas {
					c.complete(r, prompt("elections", 2))
				}
				time.Sleep(200 * time.Millisecond) // the traffic's pace in the measured window, not a wait for a condition
			}
			end := uint64(0)
			for _, r := range c.replicas {
				end = max(end, r.raft.Term())
			}
			perHour := float64(end-start) * float64(time.Hour) / float64(window)
			fmt.Printf("elections: %s: %d term changes in %v under load: %.0f per hour\n", tc.name, end-start, window, perHour)
		})
	}
}

// burnCPU starts n busy processes and returns what stops them.
func burnCPU(t *testing.T, n int) func() {
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}
