//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The recovery scenarios time what a fault costs after it, where the
// scenarios of TestChaos check invariants: how soon an admin write commits
// after the leader froze, how soon one made after a heal is on every
// replica, and how many requests a replica whose network came back refuses.

// recovery is one figure of a recovery scenario.
type recovery struct {
	scenario, figure, value string
}

var recoveries []recovery

const recoveryHeader = "| scenario | figure | value |\n|---|---|---|"

func (r recovery) row() string { return fmt.Sprintf("| %s | %s | %s |", r.scenario, r.figure, r.value) }

func noteRecovery(t *testing.T, scenario, figure, value string) {
	t.Logf("figure: %s: %s", figure, value)
	recoveries = append(recoveries, recovery{scenario, figure, value})
}

func TestChaosRecovery(t *testing.T) {
	t.Run("leader-frozen-sigstop", leaderFrozen)
	t.Run("heal-after-25s-netdisconnect", healedWrite)
	t.Run("heal-after-25s-iptables-drop", healedBlackHole)
	t.Run("network-back-after-20s-netdisconnect", networkBack)
}

// leaderFrozen stops the Raft leader's process (SIGSTOP: its kernel still
// accepts connections, and the follower's pooled connection to it stays
// open) and writes through a follower: the first write must fail fast with
// 503, and a write commits once the others elected a new leader.
func leaderFrozen(t *testing.T) {
	const sc = "leader-frozen-sigstop"
	clusterFormed(t)
	leader := leaderName(t)
	via := followerOf(leader)
	setState(t, via, drainedWorker, "drain") // pools the follower's connection to the leader
	setState(t, via, drainedWorker, "activate")
	id := containerID(t, leader)
	docker(t, "kill", "-s", "STOP", id)
	frozen := time.Now()
	code, body, err := post(fmt.Sprintf("%s/workers/%d/drain", replicas[via], drainedWorker), "{}")
	first := time.Since(frozen)
	noteRecovery(t, sc, "first write through a follower", fmt.Sprintf("%d after %.2f s", code, first.Seconds()))
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader reachable") || first > 2*time.Second {
		t.Errorf("the first write after the leader froze: %d %q %v after %v, want 503 \"no leader reachable\" within 2 s", code, body, err, first)
	}
	took := testwait.EventuallyNil(t, 60*time.Second, func() error {
		code, body, err := post(fmt.Sprintf("%s/workers/%d/drain", replicas[via], drainedWorker), "{}")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	}, "a write to commit with the leader frozen")
	noteRecovery(t, sc, "time to a committed write", fmt.Sprintf("%.1f s", (took+first).Seconds()))
	docker(t, "kill", "-s", "CONT", id)
	testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after the leader woke")
	setState(t, via, drainedWorker, "activate")
	everyoneSees(t, drainedWorker, "active")
	registryIdentical(t)
}

// healedWrite cuts r3 off the network for 25 s, long enough for Raft's
// backoff to a follower it cannot reach to grow to its ceiling, heals it,
// and at once drains a worker through r1, which stayed connected: the time
// from the heal to that write being on every replica, r3 included, is how
// soon the leader replicates to the healed follower again. Then the worker
// is activated through r3 itself, whose forward to the leader must first
// find it again (resolving its name included).
func healedWrite(t *testing.T) {
	const sc = "heal-after-25s-netdisconnect"
	clusterFormed(t)
	healed := faultFor(t, disconnect("r3"), 25*time.Second)
	setState(t, "r1", drainedWorker, "drain")
	everyoneSees(t, drainedWorker, "draining")
	everywhere := time.Since(healed)
	noteRecovery(t, sc, "a write through r1 after the heal, on every replica", fmt.Sprintf("%.1f s after the heal", everywhere.Seconds()))
	if everywhere > 2*time.Second {
		t.Errorf("a write made after the heal was on every replica %.1f s after it, want within 2 s", everywhere.Seconds())
	}
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		code, body, err := post(fmt.Sprintf("%s/workers/%d/activate", replicas["r3"], drainedWorker), "{}")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		if err != nil {
			t.Logf("%.2f s after the heal: %v", time.Since(healed).Seconds(), err)
		}
		return err
	}, "an activation through the healed r3")
	committed := time.Since(healed)
	everyoneSees(t, drainedWorker, "active")
	noteRecovery(t, sc, "then a write through r3, committed / on every replica",
		fmt.Sprintf("%.1f s / %.1f s after the heal", committed.Seconds(), time.Since(healed).Seconds()))
	testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after healing")
	registryIdentical(t)
}

// healedBlackHole drops every packet between r3 and its peers for 25 s
// with iptables DROP in r3's network namespace, a black hole (no refusal,
// no reset: the leader's RPCs to r3 time out), heals it, and at once drains
// a worker through r3 itself, sent again while r3 answers 503 (it has not
// heard from the leader yet): the write must be in r3's own registry within
// 2 s of the heal. Raft's replication used to back off after each RPC that
// timed out, and r3 stayed stale for 5 s and more.
func healedBlackHole(t *testing.T) {
	const sc = "heal-after-25s-iptables-drop"
	clusterFormed(t)
	healed := faultFor(t, firewall("r3"), 25*time.Second)
	setState(t, "r3", drainedWorker, "drain")
	committed := time.Since(healed)
	testwait.EventuallyNil(t, 30*time.Second, func() error {
		st, err := workerState("r3", drainedWorker)
		if err == nil && st != "draining" {
			err = fmt.Errorf("r3 sees it %s", st)
		}
		return err
	}, "the drain made through r3 in its own registry")
	onR3 := time.Since(healed)
	noteRecovery(t, sc, "a write through the healed r3, committed / in r3's registry",
		fmt.Sprintf("%.1f s / %.1f s after the heal", committed.Seconds(), onR3.Seconds()))
	if onR3 > 2*time.Second {
		t.Errorf("the write made through r3 after the heal was in its registry %.1f s after it, want within 2 s", onR3.Seconds())
	}
	setState(t, "r1", drainedWorker, "activate")
	everyoneSees(t, drainedWorker, "active")
	testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after healing")
	registryIdentical(t)
}

// faultFor holds the fault inject makes for long, heals it, and returns
// when it healed.
func faultFor(t *testing.T, inject func(*testing.T) func(*testing.T), long time.Duration) time.Time {
	heal := inject(t)
	time.Sleep(long) // the fault the scenario holds, not a wait for a condition
	heal(t)
	return time.Now()
}

// networkBack cuts r3 off its network for 20 s (workers and peers all
// unreachable at once) and sends requests to r3 alone from the moment it
// is back: the requests it answered 503 are counted.
func networkBack(t *testing.T) {
	const sc = "network-back-after-20s-netdisconnect"
	clusterFormed(t)
	healed := faultFor(t, disconnect("r3"), 20*time.Second)
	var answered, refused, other int
	var firstOK, slowest time.Duration = -1, 0
	var slowestWas string
	for time.Since(healed) < 5*time.Second {
		sent := time.Now()
		code, err := completeAt(replicas["r3"], fmt.Sprintf("network back %d", answered+refused+other))
		if took := time.Since(sent); took > slowest {
			slowest, slowestWas = took, fmt.Sprintf("%d %v", code, err)
		}
		switch {
		case err == nil && code == http.StatusOK:
			answered++
			if firstOK < 0 {
				firstOK = time.Since(healed)
			}
		case err == nil && code == http.StatusServiceUnavailable:
			refused++
		default:
			other++
		}
		time.Sleep(20 * time.Millisecond) // the client's pace over the measured window
	}
	noteRecovery(t, sc, "r3's answers in the 5 s after its network came back",
		fmt.Sprintf("%d answered, %d refused 503, %d other (connection errors)", answered, refused, other))
	noteRecovery(t, sc, "r3's first 200 after the heal", fmt.Sprintf("%.1f s", firstOK.Seconds()))
	// A first answer that comes late is either one request that waited (say
	// on a connection the outage left in retransmission backoff) or many
	// that failed fast: the slowest one tells which.
	noteRecovery(t, sc, "r3's slowest request in those 5 s", fmt.Sprintf("%.2f s, status and error: %s", slowest.Seconds(), slowestWas))
	if refused != 0 {
		t.Errorf("r3 answered %d requests 503 after its network came back, want none", refused)
	}
	testwait.EventuallyNil(t, 90*time.Second, converged, "membership to converge after healing")
}

// completeAt sends one short completion to base and returns its status.
func completeAt(base, prompt string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4}`, prompt)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := chaosHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// followerOf is a replica other than leader.
func followerOf(leader string) string {
	for _, n := range replicaNames {
		if n != leader {
			return n
		}
	}
	return ""
}
