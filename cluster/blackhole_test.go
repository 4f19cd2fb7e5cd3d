package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/faultnet"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// healedWithin is how soon after its network heals a follower holds a
// write made through it.
const healedWithin = 2 * time.Second

// TestAWriteReachesAFollowerHealedFromAPartition cuts a follower's cluster
// port off the network, once in each way a network fails: a black hole
// (packets vanish, connections stay open and silent, every RPC runs into its
// timeout) for the 25 s that left a follower stale for 5 s and more, then
// a port that resets every connection and one that refuses them, each for
// 10 s, long enough for failing RPCs to push hashicorp/raft's backoff past
// a second. The leader's replication to it fails at most once in each (each
// failure would double Raft's backoff, up to 10 s that nothing wakes);
// right after the heal, a write made through that follower commits, and the
// follower's own registry holds it within healedWithin.
func TestAWriteReachesAFollowerHealedFromAPartition(t *testing.T) {
	c := newTestCluster(t, 1)
	failures := &appendFailures{by: map[string]int{}}
	proxies := c.startBehindProxies(3, func(cfg *Config) {
		cfg.ReapTimeout = time.Hour // no reap-and-re-add to hide the backoff
		cfg.Logger = slog.New(failures)
	})
	c.waitReady()
	for i, p := range []struct {
		mode faultnet.Mode
		long time.Duration
	}{{faultnet.Drop, 25 * time.Second}, {faultnet.Reset, 10 * time.Second}, {faultnet.Refuse, 10 * time.Second}} {
		cut := c.follower()
		healed := partition(t, proxies[cut.cfg.NodeName], p.mode, p.long, cut, failures)
		writeAfterHeal(t, c, cut, healed, fmt.Sprintf("http://127.0.0.1:%d", 9+i), p.mode)
	}
}

// partition cuts r's proxy off the network in mode for long, heals it, and
// returns when it healed. It fails the test when the leader's AppendEntries
// to r failed more than once meanwhile.
func partition(t *testing.T, p *faultnet.Proxy, mode faultnet.Mode, long time.Duration, r *Replica, failures *appendFailures) time.Time {
	t.Helper()
	addr := r.raft.Addr()
	before := failures.of(addr)
	p.Cut(mode)
	<-time.After(long) // the partition itself, not a wait for something
	if err := p.Heal(); err != nil {
		t.Fatalf("healing %s: %v", r.cfg.NodeName, err)
	}
	if n := failures.of(addr) - before; n > 1 {
		t.Errorf("%s for %v: the leader's AppendEntries to %s failed %d times, want at most once", mode, long, r.cfg.NodeName, n)
	}
	return time.Now()
}

// writeAfterHeal writes worker url through r, sent again while r answers
// 503 as a client would (r has not heard from the leader since the heal
// yet), and checks that r's registry holds it within healedWithin of the
// heal.
func writeAfterHeal(t *testing.T, c *testCluster, r *Replica, healed time.Time, url string, mode faultnet.Mode) {
	t.Helper()
	name := r.cfg.NodeName
	var last string
	testwait.Eventually(t, testDeadline, func() bool {
		rep := c.do(r, http.MethodPost, "/workers", fmt.Sprintf(`{"url":%q}`, url))
		last = fmt.Sprintf("%d %s", rep.Status, rep.Body)
		return rep.Status == http.StatusCreated
	}, "%s: a write through %s after the heal to commit (last answer: %v)", mode, name, &last)
	committed := time.Since(healed)
	testwait.Eventually(t, testDeadline, func() bool {
		_, ok := r.fsm.View().WorkerByURL(url)
		return ok
	}, "%s: the write made through %s in its own registry", mode, name)
	reached := time.Since(healed)
	t.Logf("%s: the write committed %v after the heal and was in %s's registry %v after it", mode, committed, name, reached)
	if reached > healedWithin {
		t.Errorf("%s: the write reached %s's registry %v after the heal, want within %v", mode, name, reached, healedWithin)
	}
}

// startBehindProxies starts replicas r0..r(n-1) as startN does, each
// advertising a faultnet proxy in front of its cluster port as its Raft
// address, so that every connection to it (Raft's and the replicas' HTTP)
// can be cut.
func (c *testCluster) startBehindProxies(n int, opts ...clusterOptions) map[string]*faultnet.Proxy {
	c.t.Helper()
	c.opts = opts
	proxies := map[string]*faultnet.Proxy{}
	var join []string
	for i := range n {
		name := fmt.Sprintf("r%d", i)
		p := faultnet.Start(c.t, "")
		r := c.start(c.config(name, n, join, func(cfg *Config) { cfg.RaftAdvertise = p.Addr() }))
		p.SetUpstream(r.raft.Port().ListenAddr().String())
		proxies[name] = p
		if i == 0 {
			join = []string{r.GossipAddr()}
		}
	}
	return proxies
}

// appendFailures is a slog handler that counts hashicorp/raft's "failed to
// appendEntries" records by the Raft address of the peer they name.
type appendFailures struct {
	mu sync.Mutex
	by map[string]int
}

func (h *appendFailures) Enabled(context.Context, slog.Level) bool { return true }

func (h *appendFailures) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "failed to appendEntries") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "peer" {
			return true
		}
		peer := a.Value.String() // {Voter r1 127.0.0.1:1234}
		if i := strings.LastIndexByte(peer, ' '); i >= 0 {
			h.mu.Lock()
			h.by[strings.TrimSuffix(peer[i+1:], "}")]++
			h.mu.Unlock()
		}
		return false
	})
	return nil
}

func (h *appendFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *appendFailures) WithGroup(string) slog.Handler      { return h }

// of is how many failures to the peer at addr were logged.
func (h *appendFailures) of(addr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[addr]
}
