//go:build chaos

package chaos

import (
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// scenario is one fault: inject it, keep it for hold, heal it. While it
// holds, 16 clients send conversation turns through the replicas and a
// registry write (a drain of worker 1) goes through writeVia ("" writes
// before the fault).
type scenario struct {
	name     string
	stream   bool
	hold     time.Duration
	writeVia string
	inject   func(t *testing.T) (heal func(t *testing.T))
}

// maxConvergence is how soon after healing the membership must agree again.
const maxConvergence = 10 * time.Second

// drainedWorker is the worker whose drain must survive every fault.
const drainedWorker = 1

func (sc scenario) run(t *testing.T) {
	clusterFormed(t)
	convs := probeConversations(sc.name, 12)
	before, err := hitRate(convs)
	if err != nil {
		t.Fatalf("hit rate before: %v", err)
	}
	l := startLoad(16, sc.stream)
	time.Sleep(2 * time.Second) // traffic before the fault: part of the scenario
	if sc.writeVia == "" {
		setState(t, "r1", drainedWorker, "drain")
	}
	heal := sc.inject(t)
	if sc.writeVia != "" {
		setState(t, sc.writeVia, drainedWorker, "drain")
	}
	time.Sleep(sc.hold) // the fault the scenario holds, not a wait for a condition
	heal(t)
	took := testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after healing")
	time.Sleep(3 * time.Second) // traffic on the healed cluster
	stats := l.end()
	everyoneSees(t, drainedWorker, "draining")
	setState(t, "r2", drainedWorker, "activate")
	everyoneSees(t, drainedWorker, "active")
	after, err := hitRate(convs)
	if err != nil {
		t.Fatalf("hit rate after: %v", err)
	}
	loadsDrain(t)
	registryIdentical(t)
	f := figures{name: sc.name, convergence: took, stats: stats, hitBefore: before, hitAfter: after}
	report = append(report, f)
	t.Logf("figures: converged %.1f s after healing; %d requests, %d retried, %d streams cut visibly, %d cut silently, %d failed; hit rate %.3f before, %.3f after",
		took.Seconds(), stats.requests, stats.retried, stats.cutVisibly, stats.silentCuts, stats.failed, before, after)
	if stats.failed != 0 || stats.silentCuts != 0 {
		t.Errorf("%d requests failed for good and %d streams were cut silently, want none (%v)", stats.failed, stats.silentCuts, l.lastErr)
	}
	if took > maxConvergence {
		t.Errorf("membership converged %.1f s after healing, want within %v", took.Seconds(), maxConvergence)
	}
	if math.Abs(after-before) > 0.05 {
		t.Errorf("hit rate %.3f after healing, %.3f before: more than 5 points apart", after, before)
	}
}

func TestChaos(t *testing.T) {
	for _, sc := range []scenario{
		{name: "partition-5s-netdisconnect", hold: 5 * time.Second, writeVia: "r1", inject: disconnect("r3")},
		{name: "partition-60s-netdisconnect", hold: 60 * time.Second, writeVia: "r1", inject: disconnect("r3")},
		{name: "partition-5s-iptables", hold: 5 * time.Second, writeVia: "r1", inject: firewall("r3")},
		{name: "partition-60s-iptables", hold: 60 * time.Second, writeVia: "r1", inject: firewall("r3")},
		{name: "replica-stall-sigstop-8s", hold: 8 * time.Second, writeVia: "r1", inject: signal("r2", "STOP", "CONT")},
		{name: "rolling-restart", writeVia: "", inject: rollingRestart},
		{name: "all-replicas-killed", hold: 2 * time.Second, writeVia: "", inject: killAll},
		{name: "worker-wedged", hold: 15 * time.Second, writeVia: "r2", inject: fault("w2", `{"mode":"wedge"}`)},
		{name: "worker-degraded-20x", hold: 20 * time.Second, writeVia: "r2", inject: fault("w3", `{"mode":"degrade","factor":20}`)},
		{name: "worker-paused", hold: 10 * time.Second, writeVia: "r2", inject: pause("w3")},
		{name: "worker-killed-streaming", stream: true, hold: 5 * time.Second, writeVia: "r2", inject: killWorker("w4")},
	} {
		t.Run(sc.name, sc.run)
	}
	t.Run("raft-leader-killed-during-writes", leaderKilledDuringWrites)
}

// disconnect takes replica off the compose network; healing puts it back
// at the same address, under its service name.
func disconnect(replica string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		network, ip := networkOf(t, replica)
		id := containerID(t, replica)
		docker(t, "network", "disconnect", network, id)
		return func(t *testing.T) { docker(t, "network", "connect", "--ip", ip, "--alias", replica, network, id) }
	}
}

// firewall drops every packet between replica and the other replicas with
// iptables inside replica's network namespace (the container's, made for
// this test); the workers and the clients still reach it.
func firewall(replica string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		pid := inspect(t, replica, "{{.State.Pid}}")
		var rules [][]string
		for _, other := range replicaNames {
			if other == replica {
				continue
			}
			_, ip := networkOf(t, other)
			rules = append(rules, []string{"INPUT", "-s", ip, "-j", "DROP"}, []string{"OUTPUT", "-d", ip, "-j", "DROP"})
		}
		for _, r := range rules {
			nsIptables(t, pid, append([]string{"-I"}, r...)...)
		}
		return func(t *testing.T) {
			for _, r := range rules {
				nsIptables(t, pid, append([]string{"-D"}, r...)...)
			}
		}
	}
}

func nsIptables(t *testing.T, pid string, args ...string) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"-t", pid, "-n", "iptables"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables %v in %s's namespace: %v\n%s", args, pid, err, out)
	}
}

// signal sends stop to replica's process, and cont when healing.
func signal(replica, stop, cont string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		id := containerID(t, replica)
		docker(t, "kill", "-s", stop, id)
		return func(t *testing.T) { docker(t, "kill", "-s", cont, id) }
	}
}

// rollingRestart restarts the replicas one by one (SIGTERM, then start),
// each once the cluster has converged again.
func rollingRestart(t *testing.T) func(t *testing.T) {
	for _, n := range replicaNames {
		compose(t, "restart", "-t", "20", n)
		testwait.EventuallyNil(t, 90*time.Second, converged, "the cluster to converge after restarting %s", n)
	}
	return func(*testing.T) {}
}

// killAll kills every replica at once (SIGKILL); healing starts them again
// on their volumes.
func killAll(t *testing.T) func(t *testing.T) {
	ids := []string{"kill"}
	for _, n := range replicaNames {
		ids = append(ids, containerID(t, n))
	}
	docker(t, ids...)
	return func(t *testing.T) { compose(t, "start", "r1", "r2", "r3") }
}

func fault(worker, f string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		workerFault(t, worker, f)
		return func(t *testing.T) { workerFault(t, worker, `{"mode":"none"}`) }
	}
}

func pause(worker string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		compose(t, "pause", worker)
		return func(t *testing.T) { compose(t, "unpause", worker) }
	}
}

func killWorker(worker string) func(t *testing.T) func(t *testing.T) {
	return func(t *testing.T) func(t *testing.T) {
		compose(t, "kill", worker)
		return func(t *testing.T) {
			compose(t, "start", worker)
			testwait.EventuallyNil(t, 60*time.Second, func() error { return healthyEverywhere(worker) }, "%s healthy on every replica", worker)
		}
	}
}

// healthyEverywhere checks that every replica has worker eligible again.
func healthyEverywhere(worker string) error {
	for _, n := range replicaNames {
		var l struct {
			Workers []struct {
				URL     string `json:"url"`
				Healthy bool   `json:"healthy"`
			} `json:"workers"`
		}
		if err := getJSON(replicas[n]+"/get_loads", &l); err != nil {
			return err
		}
		for _, w := range l.Workers {
			if strings.Contains(w.URL, "//"+worker+":") && !w.Healthy {
				return fmt.Errorf("%s sees %s unhealthy", n, worker)
			}
		}
	}
	return nil
}

// leaderKilledDuringWrites drains and activates worker 1 over and over
// through a follower while the Raft leader is killed and restarted: every
// acknowledged write is kept, and the last one is what every replica holds.
func leaderKilledDuringWrites(t *testing.T) {
	clusterFormed(t)
	l := startLoad(16, false)
	leader := leaderName(t)
	via := "r1"
	if leader == via {
		via = "r2"
	}
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		acked, writes := 0, 0
		for {
			select {
			case <-stop:
				done <- acked
				return
			default:
			}
			action := []string{"drain", "activate"}[writes%2]
			if code, _, err := post(fmt.Sprintf("%s/workers/%d/%s", replicas[via], drainedWorker, action), "{}"); err == nil && code == 200 {
				acked++
				writes++
			}
			time.Sleep(50 * time.Millisecond) // the writer's pace
		}
	}()
	time.Sleep(2 * time.Second) // writes before the kill: part of the scenario
	compose(t, "kill", leader)
	time.Sleep(5 * time.Second) // the leader stays down: part of the scenario
	compose(t, "start", leader)
	took := testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after the leader's restart")
	close(stop)
	acked := <-done
	want := []string{"active", "draining"}[acked%2]
	everyoneSees(t, drainedWorker, want)
	setState(t, via, drainedWorker, "activate")
	stats := l.end()
	loadsDrain(t)
	registryIdentical(t)
	report = append(report, figures{name: "raft-leader-killed-during-writes", convergence: took, stats: stats,
		hitBefore: math.NaN(), hitAfter: math.NaN()})
	t.Logf("figures: %d writes acknowledged, the last one kept; converged %.1f s after the restart; %d requests, %d retried, %d failed",
		acked, took.Seconds(), stats.requests, stats.retried, stats.failed)
	if stats.failed != 0 || stats.silentCuts != 0 {
		t.Errorf("%d requests failed and %d streams were cut silently, want none (%v)", stats.failed, stats.silentCuts, l.lastErr)
	}
	if took > maxConvergence {
		t.Errorf("membership converged %.1f s after the restart, want within %v", took.Seconds(), maxConvergence)
	}
}
