package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// These tests run several replicas in this process, each with real
// memberlist gossip and real Raft on loopback ports, in front of fake
// workers that name themselves in x-worker-id.

// TestClusterRoutesAsOne covers the registry, admin forwarding, prefix
// affinity and load sharing across replicas, and membership changes, with
// the replica links over cluster TLS (TestClusterSurvivesFailures runs
// them plain). The subtests share one cluster and run in order.
func TestClusterRoutesAsOne(t *testing.T) {
	c := newTestCluster(t, 4)
	// One replica's own held requests must count once: the tests make a
	// worker hot through one replica and look at what the others do.
	c.startN(3, func(cfg *Config) { cfg.Routing.Thresholds.BalanceAbs = 2; cfg.CountOwnBurstOnce = true },
		withTLS(certDir(t, "r0", "r1", "r2", "r3")))
	c.waitReady()

	t.Run("the first replicas are the voters and the registry converges", func(t *testing.T) {
		c.t = t
		lead := c.leader()
		var st adminapi.Status
		if err := json.Unmarshal([]byte(c.get(lead, "/cluster/status").Body), &st); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.Voters, []string{"r0", "r1", "r2"}) || len(st.Nonvoters) != 0 || st.Leader != lead.cfg.NodeName {
			t.Fatalf("status: voters %v, non-voters %v, leader %q; want r0-r2 voting under %s", st.Voters, st.Nonvoters, st.Leader, lead.cfg.NodeName)
		}
		if len(st.Members) != 3 || st.Members[0].State != "alive" || st.Members[2].Suffrage != "voter" || st.Members[1].APIAddress == "" {
			t.Fatalf("members = %+v", st.Members)
		}
		for name, r := range c.replicas {
			testwait.Eventually(t, testDeadline, func() bool {
				peers := r.views.peerStatus()
				return len(peers) == 2 && peers[0].LastReportAge >= 0 && peers[1].LastReportAge >= 0
			}, "%s hears every peer's load reports", name)
		}
		scrape := c.get(c.replicas["r0"], "/metrics").Body
		for _, want := range []string{"vllm_router_cluster_members 3\n", "vllm_router_cluster_gossip_sent_bytes_total ",
			"vllm_router_cluster_gossip_received_messages_total ", `vllm_router_cluster_gossip_lag_seconds{origin="r1"} `,
			"vllm_router_cluster_gossip_facts_dropped_total 0\n", "vllm_router_cluster_raft_term "} {
			if !strings.Contains(scrape, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})

	t.Run("an admin write through a follower reaches every replica", func(t *testing.T) {
		c.t = t
		f := c.follower()
		added := c.do(f, http.MethodPost, "/workers", `{"url":"http://127.0.0.1:1","model":"other"}`)
		admintest.ExpectStatus(t, added, http.StatusCreated)
		id := added.Worker(t).ID
		c.waitRegistryEverywhere("the new worker", func(reg *store.Registry) bool { _, ok := reg.Worker(id); return ok })
		admintest.ExpectStatus(t, c.do(f, http.MethodPost, fmt.Sprintf("/workers/%d/drain", id), ""), http.StatusOK)
		c.waitRegistryEverywhere("the worker draining", func(reg *store.Registry) bool {
			w, _ := reg.Worker(id)
			return w.State == store.StateDraining
		})
		admintest.ExpectStatus(t, c.do(f, http.MethodDelete, fmt.Sprintf("/workers/%d", id), ""), http.StatusOK)
		c.waitRegistryEverywhere("the worker removed", func(reg *store.Registry) bool { _, ok := reg.Worker(id); return !ok })
		// The leader's refusal comes back through the follower as is.
		missing := c.do(f, http.MethodDelete, fmt.Sprintf("/workers/%d", id), "")
		if admintest.ExpectStatus(t, missing, http.StatusNotFound); missing.APIError(t).Type != "not_found_error" {
			t.Fatalf("forwarded refusal: %s", missing.Body)
		}
	})

	t.Run("a prefix continues on its worker through the other replicas", func(t *testing.T) {
		c.t = t
		r0, r1, r2 := c.replicas["r0"], c.replicas["r1"], c.replicas["r2"]
		owners := map[string]string{}
		var prompts []string
		for i := range 4 {
			p := prompt(fmt.Sprintf("conversation %d", i), 6)
			prompts = append(prompts, p)
			owners[p] = c.complete(r0, p)
		}
		for _, p := range prompts {
			for _, r := range []*Replica{r1, r2} {
				id := c.workerID(r, owners[p])
				testwait.Eventually(t, testDeadline, func() bool { return knowsPrefix(r, p, id) }, "%s learns who owns a prefix", r.cfg.NodeName)
			}
		}
		// Later turns arrive at the other replicas in another order, so that
		// placing them as misses would pick other workers.
		for i, p := range slices.Backward(prompts) {
			for _, r := range []*Replica{r1, r2} {
				if got := c.complete(r, p+fmt.Sprintf(" turn %d at %s", i, r.cfg.NodeName)); got != owners[p] {
					t.Errorf("a later turn through %s went to %s, want %s", r.cfg.NodeName, got, owners[p])
				}
			}
		}
	})

	t.Run("a replica sheds the prefix of a worker another replica made hot", func(t *testing.T) {
		c.t = t
		defer c.releaseAll() // a failure must not leave requests held
		r0, r1 := c.replicas["r0"], c.replicas["r1"]
		p := prompt("hot conversation", 6)
		owner := c.complete(r0, p)
		id := c.workerID(r1, owner)
		testwait.Eventually(t, testDeadline, func() bool { return knowsPrefix(r1, p, id) }, "r1 learns the owner")
		hot := c.workerByName(owner)
		held := c.holdThrough(r0, p, 3) // abs threshold 2: three make it hot
		testwait.Eventually(t, testDeadline, func() bool { m, _ := loadsOf(r1, id); return m == 3 }, "r1 sees the load r0 put on the owner")

		got := c.complete(r1, p+" one more turn")
		hot.release()
		for _, w := range held() {
			if w != owner {
				t.Errorf("a held request went to %s, not the owner %s", w, owner)
			}
		}
		if got == owner {
			t.Fatalf("r1 sent the prefix to %s although r0 made it hot", owner)
		}
		if !knowsPrefix(r1, p, id) {
			t.Fatal("r1 forgot the owner; the request went elsewhere as a miss, not as a shed")
		}
	})

	t.Run("load views and prefill backlogs converge to zero after traffic", func(t *testing.T) {
		c.t = t
		defer c.releaseAll()
		p := prompt("busy conversation", 4)
		held1 := c.holdThrough(c.replicas["r1"], p, 2)
		held2 := c.holdThrough(c.replicas["r2"], p, 1)
		testwait.Eventually(t, testDeadline, func() bool { return c.mergedInFlight(c.replicas["r0"]) == 3 }, "r0 sees the others' load")
		// The held requests wait for their first token: their prompts are
		// their workers' backlog, at r0 as where they were sent, to the
		// block (loadsync.BacklogUnit, rounded up).
		backlog := c.backlog(c.replicas["r1"], heardBacklog) + c.backlog(c.replicas["r2"], heardBacklog)
		if backlog == 0 {
			t.Fatal("held requests left no prefill backlog")
		}
		testwait.Eventually(t, testDeadline, func() bool { return c.backlog(c.replicas["r0"], (*affinity.Load).MergedBacklog) == backlog },
			"r0 sees the others' prefill backlog of %d bytes", backlog)
		c.releaseAll()
		held1()
		held2()
		for name, r := range c.replicas {
			testwait.Eventually(t, testDeadline, func() bool { return c.allLoadsZero(r) }, "%s reports zero load everywhere", name)
		}
	})

	t.Run("a later replica joins as a non-voter", func(t *testing.T) {
		c.t = t
		r3 := c.start(c.config("r3", 3, []string{c.replicas["r0"].GossipAddr()}))
		lead := c.leader()
		testwait.Eventually(t, testDeadline, func() bool { return suffrageOf(t, lead, "r3") == "nonvoter" }, "r3 is a non-voter")
		c.waitRegistryEverywhere("r3 has the registry", func(reg *store.Registry) bool { return reg.Len() == len(c.workers) })
		if got := c.complete(r3, prompt("conversation 0", 6)+" from r3"); got == "" {
			t.Fatal("r3 does not route")
		}
	})

	t.Run("a replica back at a new address is moved, one that stays away is reaped", func(t *testing.T) {
		c.t = t
		lead := c.leader() // r3 learns who leads only once the leader has moved it
		old := c.replicas["r3"]
		c.stop("r3", true)
		back := c.restart("r3", false, old)
		testwait.Eventually(t, testDeadline, func() bool {
			return raftAddrOf(t, lead, "r3") == back.RaftAddr()
		}, "the leader moves r3 to its new raft address")
		if suffrageOf(t, lead, "r3") != "nonvoter" {
			t.Fatal("r3 changed suffrage when it moved")
		}
		c.stop("r3", true)
		testwait.Eventually(t, testDeadline, func() bool { return suffrageOf(t, lead, "r3") == "" }, "the leader reaps r3")
	})
}

// TestClusterSurvivesFailures covers rendezvous placement, verdict gossip,
// restarts, and the loss of the leader and of the quorum. The subtests
// share one cluster and run in order.
func TestClusterSurvivesFailures(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startN(3, func(cfg *Config) {
		cfg.Routing.MissPlacement = affinity.PlaceRendezvous
		cfg.Health.WedgeTimeout = 500 * time.Millisecond
		cfg.Health.EvalInterval = 50 * time.Millisecond
	})
	c.waitReady()

	t.Run("concurrent cold requests through different replicas agree", func(t *testing.T) {
		c.t = t
		// Skew r0's selection counters, so that placement by least load
		// (ties broken by how often each replica picked a worker) would
		// disagree across replicas.
		c.complete(c.replicas["r0"], prompt("warm-up", 1))
		for i := range 8 {
			p := prompt(fmt.Sprintf("cold %d", i), 3)
			var wg sync.WaitGroup
			got := make([]string, 0, 3)
			var mu sync.Mutex
			for _, r := range c.replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := c.complete(r, p)
					mu.Lock()
					got = append(got, w)
					mu.Unlock()
				}()
			}
			wg.Wait()
			if len(got) != 3 || got[0] != got[1] || got[1] != got[2] {
				t.Errorf("a new prefix sent at once through three replicas went to %v", got)
			}
		}
	})

	t.Run("wedge verdicts reach the other replicas, count with a quorum and are withdrawn", func(t *testing.T) {
		c.t = t
		defer c.releaseAll()
		r0, r1, r2 := c.replicas["r0"], c.replicas["r1"], c.replicas["r2"]
		p := prompt("wedging", 2)
		owner := c.complete(r0, p)
		id := c.workerID(r1, owner)
		testwait.Eventually(t, testDeadline, func() bool {
			return r0.monitor.Eligible(uint32(id)) && r1.monitor.Eligible(uint32(id)) && r2.monitor.Eligible(uint32(id))
		}, "every replica finds the owner eligible")
		c.workerByName(owner).wedge()
		// The wedged worker holds these; once a replica judges it stuck, it
		// fails them over to a worker that answers.
		held := c.sendHeld(r0, p+" on the wedged worker", 1)
		testwait.Eventually(t, testDeadline, func() bool {
			return slices.Equal(r1.monitor.RemoteOrigins(), []string{"r0"})
		}, "r1 hears that r0 judged the worker wedged")
		if !r1.monitor.Eligible(uint32(id)) {
			t.Fatal("the verdict of one replica of three took the worker out at r1")
		}
		heldToo := c.sendHeld(r2, p+" on the wedged worker", 1)
		testwait.Eventually(t, testDeadline, func() bool {
			return !r1.monitor.Eligible(uint32(id))
		}, "r1 takes the worker out on the verdicts of two replicas of three")
		c.workerByName(owner).release()
		held()
		heldToo()
		testwait.Eventually(t, testDeadline, func() bool { return r1.monitor.Eligible(uint32(id)) }, "the verdicts are withdrawn at r1")
	})

	t.Run("a crashed replica restarts from its data dir and catches up", func(t *testing.T) {
		c.t = t
		name := c.follower().cfg.NodeName
		old := c.replicas[name]
		c.stop(name, false)
		extra := startFakeWorker(t, "w9")
		admintest.ExpectStatus(t, c.do(c.leader(), http.MethodPost, "/workers", `{"url":"`+extra.url+`"}`), http.StatusCreated)
		back := c.restart(name, true, old)
		testwait.Eventually(t, testDeadline, func() bool {
			_, ok := back.fsm.View().WorkerByURL(extra.url)
			return ok
		}, "the restarted replica has the write it missed")
		lead := c.leader()
		testwait.Eventually(t, testDeadline, func() bool { return memberState(t, lead, name) == "alive" }, "the leader sees it alive again")
	})

	t.Run("admin writes resume after the leader dies", func(t *testing.T) {
		c.t = t
		dead := c.leader().cfg.NodeName
		c.stop(dead, false)
		lead := c.leader()
		if lead.cfg.NodeName == dead {
			t.Fatal("the dead leader still leads")
		}
		f := c.follower()
		added := c.do(f, http.MethodPost, "/workers", `{"url":"http://127.0.0.1:2","model":"other"}`)
		admintest.ExpectStatus(t, added, http.StatusCreated)
		c.waitRegistryEverywhere("the write made after the failover", func(reg *store.Registry) bool {
			_, ok := reg.Worker(added.Worker(t).ID)
			return ok
		})
	})

	t.Run("without a quorum writes fail fast and routing goes on", func(t *testing.T) {
		c.t = t
		c.stop(c.follower().cfg.NodeName, false)
		last := c.anyLive("")
		testwait.Eventually(t, testDeadline, func() bool { return !last.raft.IsLeader() }, "the last replica stops leading")
		begin := time.Now()
		refused := c.do(last, http.MethodPost, "/workers", `{"url":"http://127.0.0.1:3"}`)
		if took := time.Since(begin); took > 2*time.Second {
			t.Errorf("the refusal took %v", took)
		}
		admintest.ExpectStatus(t, refused, http.StatusServiceUnavailable)
		if refused.Header.Get("Retry-After") == "" || refused.APIError(t).Type != "service_unavailable_error" {
			t.Fatalf("refusal: %v %s", refused.Header, refused.Body)
		}
		if got := c.complete(last, prompt("still routing", 2)); got == "" {
			t.Fatal("routing stopped with the quorum")
		}
	})
}

func TestReplicaWithAnotherBlockSizeIsRefusedAtJoin(t *testing.T) {
	c := newTestCluster(t, 1)
	first := c.start(c.config("r0", 1, nil))
	odd := c.config("odd", 1, []string{first.GossipAddr()}, func(cfg *Config) { cfg.Routing.BlockSize = 128 })
	_, err := Start(context.Background(), odd)
	if !errors.Is(err, loadsync.ErrConfigMismatch) || !strings.Contains(err.Error(), "block_size 128 vs 256") {
		t.Fatalf("Start = %v, want a config mismatch naming the block size", err)
	}
}

func TestGossipKeyKeepsOutReplicasWithoutIt(t *testing.T) {
	c := newTestCluster(t, 1)
	key := func(cfg *Config) { cfg.GossipKey = []byte("0123456789abcdef") }
	first := c.start(c.config("r0", 1, nil, key))
	c.start(c.config("r1", 1, []string{first.GossipAddr()}, key))
	_, err := Start(context.Background(), c.config("plain", 1, []string{first.GossipAddr()}))
	if !errors.Is(err, loadsync.ErrGossipKey) {
		t.Fatalf("joining without the key: %v, want ErrGossipKey", err)
	}
	testwait.Eventually(t, testDeadline, func() bool { return suffrageOf(t, first, "r1") == "nonvoter" }, "r1 joins the encrypted cluster")
}

// holdThrough sends n completions of p through r that the worker holds
// until released, and returns a function that waits for them and returns
// the workers that answered. It returns once r counts them in flight.
func (c *testCluster) holdThrough(r *Replica, p string, n int) func() []string {
	c.t.Helper()
	return c.sendHeld(r, p+" hold", n)
}

// sendHeld sends n completions of p through r and returns once r counts
// them in flight; the returned function waits for them and returns the
// workers that answered. Whether a worker holds them is the worker's
// business: a prompt with "hold" in it, or a wedged worker.
func (c *testCluster) sendHeld(r *Replica, p string, n int) func() []string {
	c.t.Helper()
	var wg sync.WaitGroup
	got := make([]string, n)
	before := c.localInFlight(r)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = c.complete(r, p+fmt.Sprintf(" %d", i))
		}()
	}
	testwait.Eventually(c.t, testDeadline, func() bool { return c.localInFlight(r) == before+int64(n) }, "%s holds %d requests", r.cfg.NodeName, n)
	return func() []string { wg.Wait(); return got }
}

func (c *testCluster) localInFlight(r *Replica) int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += l.Local() })
	return n
}

func (c *testCluster) mergedInFlight(r *Replica) int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += l.Merged() })
	return n
}

// heardBacklog is a worker's own prefill backlog as the peers hear it: in
// whole blocks of loadsync.BacklogUnit, rounded up.
func heardBacklog(l *affinity.Load) int64 {
	return (l.Backlog() + loadsync.BacklogUnit - 1) / loadsync.BacklogUnit * loadsync.BacklogUnit
}

// backlog sums a prefill backlog (own or merged) over r's workers.
func (c *testCluster) backlog(r *Replica, of func(*affinity.Load) int64) int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += of(l) })
	return n
}

func (c *testCluster) workerByName(name string) *fakeWorker {
	for _, w := range c.workers {
		if w.name == name {
			return w
		}
	}
	c.t.Fatalf("no worker named %q", name)
	return nil
}

// allLoadsZero reads r's /get_loads: no request and no prefill backlog
// anywhere.
func (c *testCluster) allLoadsZero(r *Replica) bool {
	var loads struct{ Workers []adminapi.WorkerLoad }
	if err := json.Unmarshal([]byte(c.get(r, "/get_loads").Body), &loads); err != nil {
		c.t.Fatal(err)
	}
	for _, w := range loads.Workers {
		if w.Load != 0 || w.LocalLoad != 0 || w.PrefillBacklog != 0 || w.LocalPrefillBacklog != 0 {
			return false
		}
	}
	return len(loads.Workers) > 0
}

// suffrageOf is node's suffrage in r's Raft configuration, "" when absent.
func suffrageOf(t *testing.T, r *Replica, node string) string {
	for _, s := range raftServers(t, r) {
		if s.ID == node {
			return s.Suffrage
		}
	}
	return ""
}

func raftAddrOf(t *testing.T, r *Replica, node string) string {
	for _, s := range raftServers(t, r) {
		if s.ID == node {
			return s.Addr
		}
	}
	return ""
}

func raftServers(t *testing.T, r *Replica) []raftnode.Server {
	servers, err := r.raft.Servers(raftnodetest.Context(t))
	if err != nil {
		t.Logf("raft servers: %v", err)
	}
	return servers
}

func memberState(t *testing.T, r *Replica, node string) string {
	for _, m := range r.views.status().Members {
		if m.Name == node {
			return m.State
		}
	}
	return ""
}
