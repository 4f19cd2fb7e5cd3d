//go:build chaos

package fleet

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The figures each scenario must meet.
const (
	minStayShare   = 0.97             // follow-ups on their worker
	maxConvergence = 30 * time.Second // from the end of the fault to a fleet that agrees again
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fault injects one fault while the load runs, heals it, and returns when it was healed (the
// moment convergence is timed from) and a note for the table.
type fault func(t *testing.T, fs *fleetState) (healed time.Time, note string)

func TestChaosFleet(t *testing.T) {
	if os.Getenv("KVROUTER_CHAOS_FLEET") != "1" {
		t.Skip("chaos at fleet scale runs with KVROUTER_CHAOS_FLEET=1 (make chaos-fleet)")
	}
	if os.Getenv("CHAOS_FLEET_UP") != "0" {
		up(t)
	}
	enterClientNetns(t)
	took := testwait.EventuallyNil(t, 300*time.Second, func() error { return converged(nWorkers) }, "the fleet to form")
	t.Logf("fleet formed %.0f s after up", took.Seconds())
	rounds := envInt("CHAOS_FLEET_ROUNDS", 1)
	for _, sc := range []struct {
		name      string
		f         fault
		maxTokens int // of every turn; 0 is CHAOS_FLEET_MAX_TOKENS (32)
	}{
		{"baseline-no-fault", func(*testing.T, *fleetState) (time.Time, string) {
			time.Sleep(20 * time.Second)
			return time.Now(), "no fault: the control"
		}, 0},
		{"workers-13-removed-readded", removeWorkers(13), 0},
		{"replica-sigkill-midstream", killReplica, 256}, // streams of about 2 s, so the kill lands mid-stream
		{"worker-sigkill-midstream", killWorker, 512},   // streams of about 4 s, resumed on other workers
		{"rolling-restart-8", rollingRestart, 0},
		{"partition-3-of-8", partition(3, 20*time.Second), 0},
	} {
		for round := 1; round <= rounds; round++ {
			t.Run(fmt.Sprintf("%s/round-%d", sc.name, round), func(t *testing.T) { runScenario(t, sc.name, round, sc.f, sc.maxTokens) })
		}
	}
}

func runScenario(t *testing.T, name string, round int, f fault, maxTokens int) {
	testwait.EventuallyNil(t, 120*time.Second, func() error { return converged(nWorkers) }, "the fleet to agree before the fault")
	fs := newFleetState()
	sessions, thinkMs, maxTok := envInt("CHAOS_FLEET_SESSIONS", 16), envInt("CHAOS_FLEET_THINK_MS", 250), envInt("CHAOS_FLEET_MAX_TOKENS", 32)
	if maxTokens > 0 {
		maxTok = maxTokens
	}
	l := startLoad(fs, sessions, time.Duration(thinkMs)*time.Millisecond, maxTok)
	time.Sleep(15 * time.Second) // sessions under way before the fault: part of the scenario
	healed, note := f(t, fs)
	took := convergence(t, healed, nWorkers)
	time.Sleep(5 * time.Second) // traffic on the healed fleet
	st := l.end()
	fig := figures{name: fmt.Sprintf("%s (round %d)", name, round), stats: st, convergence: took, note: note}
	reportMu.Lock()
	report = append(report, fig)
	reportMu.Unlock()
	t.Logf("figures: %d requests, %d failed (%d in flight on a killed replica), %d cut silently, %d refused at connect; follow-ups on their worker %d/%d = %.4f, %d not counted; %d follow-ups through another replica than their previous turn, %d of the moves among them; converged %.1f s after the fault; %s",
		st.requests, st.failed, st.failedOnKilled, st.silentCuts, st.refused, st.stayed, st.followUps, st.stayShare(), st.excluded,
		st.crossReplica, st.movedCross, took.Seconds(), note)
	if len(st.killedErrs) > 0 {
		t.Logf("failed in flight on the killed replica: %q", st.killedErrs)
	}
	if bad := st.failed - st.failedOnKilled; bad != 0 || st.silentCuts != 0 {
		t.Errorf("%d requests failed outside a killed replica and %d streams were cut silently, want none: %v", bad, st.silentCuts, st.errs)
	}
	if st.followUps == 0 || st.stayShare() < minStayShare {
		t.Errorf("%.4f of follow-ups stayed on their worker, want >= %.2f", st.stayShare(), minStayShare)
	}
	if took > maxConvergence {
		t.Errorf("the fleet agreed again %.1f s after the fault, want within %v", took.Seconds(), maxConvergence)
	}
}

// removeWorkers removes the last n workers from the registry (each through another replica),
// stops their containers, starts them again after 10 s and adds them back.
func removeWorkers(n int) fault {
	return func(t *testing.T, fs *fleetState) (time.Time, string) {
		ids, err := registryIDs("r1")
		if err != nil {
			t.Fatal(err)
		}
		var names, services []string
		for i := nWorkers - n + 1; i <= nWorkers; i++ {
			names = append(names, fmt.Sprintf("w%d", i))
			services = append(services, fmt.Sprintf("w%d", i))
		}
		fs.remove(names)
		start := time.Now()
		for i, w := range names {
			via := replicaNames[i%nReplicas]
			id, ok := ids[workerURL(w)]
			if !ok {
				t.Fatalf("no %s in the registry", w)
			}
			testwait.EventuallyNil(t, 30*time.Second, func() error {
				code, body, err := do("DELETE", fmt.Sprintf("%s/workers/%d", replicaURL(via), id), "")
				if err == nil && code != 200 {
					err = fmt.Errorf("%d %s", code, body)
				}
				return err
			}, "remove %s through %s", w, via)
		}
		testwait.EventuallyNil(t, 60*time.Second, func() error { return converged(nWorkers - n) }, "every replica to drop the removed workers")
		removalTook := time.Since(start)
		time.Sleep(2 * time.Second) // as an autoscaler: the engine stops after it left the registry
		compose(t, append([]string{"stop", "-t", "5"}, services...)...)
		time.Sleep(10 * time.Second) // the fleet runs a fifth smaller: part of the scenario
		compose(t, append([]string{"start"}, services...)...)
		for i, w := range names {
			via := replicaNames[(i+3)%nReplicas]
			body, _ := json.Marshal(map[string]string{"url": workerURL(w)})
			testwait.EventuallyNil(t, 60*time.Second, func() error {
				code, b, err := do("POST", replicaURL(via)+"/workers", string(body))
				if err == nil && code != 200 && code != 201 {
					err = fmt.Errorf("%d %s", code, b)
				}
				return err
			}, "add %s back through %s", w, via)
		}
		healed := time.Now()
		fs.readd(names)
		return healed, fmt.Sprintf("%s removed through 8 replicas; every replica had dropped them %.1f s after the first removal", names[0]+"-"+names[len(names)-1], removalTook.Seconds())
	}
}

// killReplica kills a replica that is not the Raft leader with SIGKILL while streams are in
// flight on it, keeps it down for 5 s and starts it again on its volume.
func killReplica(t *testing.T, fs *fleetState) (time.Time, string) {
	leader := leaderName(t)
	victim := ""
	for _, n := range slices.Backward(replicaNames) {
		if n != leader {
			victim = n
			break
		}
	}
	testwait.Eventually(t, 20*time.Second, func() bool { return atomic.LoadInt64(fs.inflight[victim]) >= 2 }, "two streams in flight on %s", victim)
	inflight := atomic.LoadInt64(fs.inflight[victim])
	id := containerID(t, victim)
	fs.killing(victim)
	docker(t, "kill", "-s", "KILL", id)
	fs.setDown(victim, true) // the balancer learns it is gone only now: whatever it sent there meanwhile is refused
	time.Sleep(5 * time.Second)
	docker(t, "start", id)
	healed := time.Now()
	testwait.Eventually(t, 60*time.Second, func() bool { return ready(victim) }, "%s ready after its restart", victim)
	fs.setDown(victim, false)
	return healed, fmt.Sprintf("%s (not the leader, %s) killed with %d streams in flight, down 5 s; ready %.1f s after its start",
		victim, leader, inflight, time.Since(healed).Seconds())
}

// killWorker kills the worker with the most streams in flight (at least two) with SIGKILL,
// keeps it down for 5 s and starts it again. Its streams, cut after their first byte, resume on
// other workers (--migration-limit): none fails, none is cut silently. The worker stays in the
// registry; while it is down its sessions' follow-ups go elsewhere, so they are not counted as
// staying or moving, as a removed worker's are not.
func killWorker(t *testing.T, fs *fleetState) (time.Time, string) {
	before := migrations(t)
	var victim string
	testwait.Eventually(t, 20*time.Second, func() bool {
		w, n := fs.busiestWorker()
		victim = w
		return n >= 2
	}, "two streams in flight on one worker")
	id := containerID(t, victim) // slow (compose): the streams are counted again after it
	testwait.Eventually(t, 20*time.Second, func() bool { return fs.streamsOn(victim) >= 2 }, "two streams in flight on %s", victim)
	streams := fs.streamsOn(victim)
	fs.remove([]string{victim})
	docker(t, "kill", "-s", "KILL", id)
	time.Sleep(5 * time.Second)
	compose(t, "start", victim)
	healed := time.Now()
	testwait.EventuallyNil(t, 60*time.Second, func() error { return converged(nWorkers) }, "every replica to see %s healthy again", victim)
	fs.readd([]string{victim})
	m := migrations(t).since(before)
	if m.resumed == 0 {
		t.Errorf("the tier resumed no stream after %s was killed with %d in flight", victim, streams)
	}
	return healed, fmt.Sprintf("%s SIGKILLed with %d streams in flight, down 5 s; the tier resumed %d streams on other workers meanwhile, "+
		"from the cut to the continuation's first bytes p50 <= %s, p99 <= %s", victim, streams, m.resumed, m.quantile(0.5), m.quantile(0.99))
}

// migrationStats is what the replicas that answer count of resumed streams:
// vllm_router_stream_migrations_total{result="resumed"} and the buckets of
// vllm_router_stream_migration_seconds (from the cut to the continuation's first bytes), summed.
type migrationStats struct {
	resumed int64
	buckets map[float64]int64 // upper bound -> streams at or under it (+Inf included)
}

func migrations(t *testing.T) migrationStats {
	t.Helper()
	st := migrationStats{buckets: map[float64]int64{}}
	const bucket = `vllm_router_stream_migration_seconds_bucket{le="`
	for _, n := range replicaNames {
		code, body, err := do("GET", replicaURL(n)+"/metrics", "")
		if err != nil || code != 200 {
			continue
		}
		for line := range strings.Lines(body) {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, `vllm_router_stream_migrations_total{result="resumed"} `); ok {
				f, _ := strconv.ParseFloat(v, 64)
				st.resumed += int64(f)
			} else if rest, ok := strings.CutPrefix(line, bucket); ok {
				le, count, _ := strings.Cut(rest, `"} `)
				bound, err1 := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
				f, err2 := strconv.ParseFloat(count, 64)
				if err1 == nil && err2 == nil {
					st.buckets[bound] += int64(f)
				}
			}
		}
	}
	return st
}

// since is what was counted between before and s.
func (s migrationStats) since(before migrationStats) migrationStats {
	d := migrationStats{resumed: s.resumed - before.resumed, buckets: map[float64]int64{}}
	for le, n := range s.buckets {
		d.buckets[le] = n - before.buckets[le]
	}
	return d
}

// quantile is the least bucket bound that q of the counted resumes were at or under, in ms: an
// upper bound, at the buckets' resolution.
func (s migrationStats) quantile(q float64) string {
	bounds := slices.Sorted(maps.Keys(s.buckets))
	total := s.buckets[math.Inf(1)]
	for _, le := range bounds {
		if total > 0 && float64(s.buckets[le]) >= q*float64(total) {
			return fmt.Sprintf("%g ms", le*1000)
		}
	}
	return "-"
}

// rollingRestart restarts every replica in turn (SIGTERM, at most 20 s to finish what it
// serves, start), each once the fleet agrees again; the balancer takes a replica out as it is
// sent SIGTERM and back once it is ready.
func rollingRestart(t *testing.T, fs *fleetState) (time.Time, string) {
	var slowest time.Duration
	var healed time.Time
	start := time.Now()
	for _, n := range replicaNames {
		id := containerID(t, n)
		fs.setDown(n, true)
		docker(t, "restart", "-t", "20", id)
		healed = time.Now()
		testwait.Eventually(t, 60*time.Second, func() bool { return ready(n) }, "%s ready after its restart", n)
		fs.setDown(n, false)
		testwait.EventuallyNil(t, 120*time.Second, func() error { return converged(nWorkers) }, "the fleet to agree after restarting %s", n)
		slowest = max(slowest, time.Since(healed))
	}
	return healed, fmt.Sprintf("8 restarts in %.0f s; the slowest step agreed %.1f s after its replica's start", time.Since(start).Seconds(), slowest.Seconds())
}

// partition cuts k replicas (the Raft leader and k-1 others) from the rest, both ways, with
// iptables DROP in each replica's network namespace, for hold; the clients and the workers
// still reach every replica.
func partition(k int, hold time.Duration) fault {
	return func(t *testing.T, fs *fleetState) (time.Time, string) {
		leader := leaderName(t)
		minority := []string{leader}
		for _, n := range slices.Backward(replicaNames) {
			if len(minority) < k && n != leader {
				minority = append(minority, n)
			}
		}
		// One rule a direction in each replica, naming every peer across the cut, so the cut
		// takes 16 iptables calls, not one per pair.
		type cut struct{ pid, peers string }
		var cuts []cut
		for _, a := range replicaNames {
			var across []string
			for _, b := range replicaNames {
				if slices.Contains(minority, a) != slices.Contains(minority, b) {
					across = append(across, replicaIP(b))
				}
			}
			cuts = append(cuts, cut{containerPid(t, a), strings.Join(across, ",")})
		}
		apply := func(op string) {
			for _, c := range cuts {
				nsIptables(t, c.pid, op, "INPUT", "-s", c.peers, "-j", "DROP")
				nsIptables(t, c.pid, op, "OUTPUT", "-d", c.peers, "-j", "DROP")
			}
		}
		start := time.Now()
		apply("-I")
		cutTook := time.Since(start)
		healed := false
		t.Cleanup(func() {
			if !healed {
				apply("-D")
			}
		})
		time.Sleep(hold)
		start = time.Now()
		apply("-D")
		healed = true
		healTook := time.Since(start)
		at := time.Now()
		after := leaderName(t)
		return at, fmt.Sprintf("%v (the leader among them) cut from the other 5 for %v (iptables DROP both ways; cut in %.1f s, healed in %.1f s); leader after: %s",
			minority, hold, cutTook.Seconds(), healTook.Seconds(), after)
	}
}
