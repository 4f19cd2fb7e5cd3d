package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// TestAPartitionedReplicaRejoinsAndIsAddedAgainAfterItsReaping cuts a
// replica off the gossip for longer than the reap timeout: the leader
// removes it from Raft, the status pages say it is dead at its last
// address, and once its network heals it joins again on its own (nothing
// calls Join for it), is added back to Raft and refills the voters.
func TestAPartitionedReplicaRejoinsAndIsAddedAgainAfterItsReaping(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(3)
	c.waitReady()
	lead := c.leader()
	var cut *Replica
	for _, r := range c.replicas {
		if r != lead {
			cut = r
		}
	}
	name, addr := cut.cfg.NodeName, cut.GossipAddr()
	reopen := cutGossip(t, cut)
	testwait.Eventually(t, testDeadline, func() bool {
		m, ok := memberNamed(c.statusOf(lead), name)
		return ok && m.State == "dead" && m.Address == addr
	}, "the leader to see %s dead at its last address", name)
	testwait.Eventually(t, testDeadline, func() bool {
		servers, err := lead.raft.Servers(context.Background())
		return err == nil && len(servers) == 2
	}, "the leader to reap %s", name)
	reopen()
	c.waitConverged("the healed replica back in the gossip and in Raft")
	testwait.Eventually(t, testDeadline, func() bool {
		st := c.statusOf(lead)
		return len(st.Voters) == 3
	}, "%s a voter again", name)
	// And it takes writes again, forwarded to the leader.
	if rep := c.do(cut, http.MethodPost, "/workers", fmt.Sprintf(`{"url":%q}`, "http://127.0.0.1:1")); rep.Status != http.StatusCreated {
		t.Fatalf("a write through the healed replica: %d %s", rep.Status, rep.Body)
	}
}

// TestStatusSaysWhetherAReplicaLeftOrDied stops one replica cleanly and
// crashes another: the survivor's status says "left" for the first and
// "dead" for the second, each with its last gossip address, never "alive".
func TestStatusSaysWhetherAReplicaLeftOrDied(t *testing.T) {
	c := newTestCluster(t, 1)
	c.startN(4, func(cfg *Config) { cfg.ReapTimeout = time.Minute })
	c.waitReady()
	left, died := c.replicas["r2"], c.replicas["r3"]
	leftAddr, diedAddr := left.GossipAddr(), died.GossipAddr()
	c.stop("r2", true)
	c.stop("r3", false)
	survivor := c.replicas["r0"]
	// A crash is declared by memberlist's suspicion, which lasts up to six
	// times its 3 s minimum when no other member confirms it in time (with
	// four members, one can): up to about 20 s with the probes, longer than
	// testDeadline on a loaded machine.
	var seen []string
	testwait.Eventually(t, 3*testDeadline, func() bool {
		st := c.statusOf(survivor)
		l, okL := memberNamed(st, "r2")
		d, okD := memberNamed(st, "r3")
		seen = []string{fmt.Sprintf("r2 %v %s at %s", okL, l.State, l.Address), fmt.Sprintf("r3 %v %s at %s", okD, d.State, d.Address)}
		return okL && okD && l.State == "left" && l.Address == leftAddr && d.State == "dead" && d.Address == diedAddr
	}, "r0 to see r2 left at %s and r3 dead at %s (last seen: %v)", leftAddr, diedAddr, &seen)
}

// TestRoutingConfigChangesForTheWholeTier changes the policy through one
// follower with a compare-and-set: every replica routes with the new one, a
// stale index is refused with 409, and a block size change with 400.
func TestRoutingConfigChangesForTheWholeTier(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startN(3)
	c.waitReady()
	f := c.follower()
	var v adminapi.RoutingView
	decodeInto(t, c.get(f, "/cluster/routing").Body, &v)
	if v.Source != "registry" || v.Index == 0 || v.Config.Policy != "cache_aware" {
		t.Fatalf("GET /cluster/routing = %+v, want the seeded cache_aware config", v)
	}
	stale := v
	v.Config.Policy = "round_robin"
	rep := c.do(f, http.MethodPut, "/cluster/routing", jsonBody(t, v))
	if rep.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", rep.Status, rep.Body)
	}
	var after adminapi.RoutingView
	decodeInto(t, rep.Body, &after)
	stale.Config.CacheThreshold = 0.9
	if rep := c.do(f, http.MethodPut, "/cluster/routing", jsonBody(t, stale)); rep.Status != http.StatusConflict ||
		!strings.Contains(rep.Body, "the routing config changed") || !strings.Contains(rep.Body, fmt.Sprintf("index %d", after.Index)) ||
		strings.Contains(rep.Body, "worker registration") {
		t.Fatalf("a PUT naming the old index: %d %s, want 409 saying the routing config changed and its index", rep.Status, rep.Body)
	}
	bad := after
	bad.Config.BlockSize = 512
	if rep := c.do(f, http.MethodPut, "/cluster/routing", jsonBody(t, bad)); rep.Status != http.StatusBadRequest || !strings.Contains(rep.Body, "block_size") {
		t.Fatalf("a PUT changing the block size: %d %s, want 400 naming block_size", rep.Status, rep.Body)
	}
	want := after.Config.Fingerprint()
	for name, r := range c.replicas {
		testwait.Eventually(t, testDeadline, func() bool {
			r.routing.mu.Lock()
			defer r.routing.mu.Unlock()
			return r.routing.inUse == want
		}, "%s routing with the new config", name)
		// One prompt, sent again and again: cache_aware would keep it on
		// one worker, round_robin spreads it.
		seen := map[string]bool{}
		for range 6 {
			seen[c.complete(r, prompt("same-"+name, 2))] = true
		}
		if len(seen) < 2 {
			t.Fatalf("%s sent one prompt to %v six times: not round robin", name, seen)
		}
	}
}

// TestARestartWithOtherThresholdsRoutesWithTheRegistrys: flags only seed a
// fresh registry; another --cache-threshold at restart is neither refused
// nor used.
func TestARestartWithOtherThresholdsRoutesWithTheRegistrys(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, echoWorker(t, "w1"))
	r := startReplica(t, cfg)
	seeded := r.fsm.View().RoutingConfig().Fingerprint()
	_ = r.Stop(context.Background())
	cfg.Routing.Thresholds.CacheThreshold = 0.8
	r = startReplica(t, cfg)
	if got := r.fsm.View().RoutingConfig(); got.CacheThreshold != 0.3 {
		t.Fatalf("registry's cache threshold %v after a restart with 0.8, want the seeded 0.3", got.CacheThreshold)
	}
	testwait.Eventually(t, testDeadline, func() bool {
		r.routing.mu.Lock()
		defer r.routing.mu.Unlock()
		return r.routing.inUse == seeded
	}, "routing with the registry's config")
}

// TestAWorkerRemovedThroughTheAdminAPIStaysRemovedAcrossARestart: seeds
// apply once per registry.
func TestAWorkerRemovedThroughTheAdminAPIStaysRemovedAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	w1, w2 := echoWorker(t, "w1"), echoWorker(t, "w2")
	cfg := testConfig(t, dir, w1, w2)
	r := startReplica(t, cfg)
	gone, _ := r.fsm.View().WorkerByURL(w2)
	if _, err := r.ApplyRegistry(context.Background(), store.NewRemoveWorker(gone.ID)); err != nil {
		t.Fatal(err)
	}
	_ = r.Stop(context.Background())
	r = startReplica(t, cfg)
	reg := r.fsm.View()
	if _, back := reg.WorkerByURL(w2); back || reg.Len() != 1 {
		t.Fatalf("after a restart with the same --worker-urls: %+v, want only w1", reg.Workers())
	}
}

// TestADataDirReusedUnderANewNodeNameStarts: a lone replica started on
// the data dir of another name takes its registry over.
func TestADataDirReusedUnderANewNodeNameStarts(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, echoWorker(t, "w1"))
	r := startReplica(t, cfg)
	_ = r.Stop(context.Background())
	cfg.NodeName = "renamed"
	cfg.Seeds = nil
	r = startReplica(t, cfg)
	if n := r.fsm.View().Len(); n != 1 {
		t.Fatalf("%d workers under the new name, want the one registered before", n)
	}
	if _, err := r.ApplyRegistry(context.Background(), store.NewAddWorker(store.AddWorker{URL: "http://127.0.0.1:2"})); err != nil {
		t.Fatalf("a write under the new name: %v", err)
	}
}

// TestAWriteForwardedToALeaderThatNeverAnswersFailsAtOnce: the leader's
// cluster port accepts the connection and never answers the TLS handshake
// (a stopped process, a black hole): the forward gives up after the
// connect bound, long before the write's own deadline, as
// raftnode.ErrLeaderUnreachable, which the admin API answers 503 "no leader
// reachable".
func TestAWriteForwardedToALeaderThatNeverAnswersFailsAtOnce(t *testing.T) {
	dir := certDir(t, "r0")
	tlsState, err := link.LoadTLS(link.NodeTLSFiles(dir, "r0"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := link.Open("127.0.0.1:0", nil, tlsState, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	rpc := link.NewClient(port, rpcTimeout)
	defer rpc.Close()
	f := raftnode.NewForwarder(nil, rpc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = f.Forward(ctx, &raftnode.NotLeaderError{LeaderID: "r1", LeaderAddr: silent.Addr().String()},
		store.NewAddWorker(store.AddWorker{URL: "http://127.0.0.1:3"}))
	if !errors.Is(err, raftnode.ErrLeaderUnreachable) || ctx.Err() != nil {
		t.Fatalf("forward = %v (ctx %v), want raftnode.ErrLeaderUnreachable before the write's deadline", err, ctx.Err())
	}
	if status, _ := admin.ErrorStatus(err); status != http.StatusServiceUnavailable || !strings.HasPrefix(admin.ErrorMessage(status, err), "no leader reachable") {
		t.Fatalf("answered %d %q, want 503 no leader reachable", status, admin.ErrorMessage(status, err))
	}
}

// TestAWriteForwardedToAFrozenLeaderFailsAtOnceAndNeverReachesIt: the
// leader's cluster port completes the TLS handshake (a connection pooled
// before its process froze) and then reads and answers nothing, as a
// SIGSTOPped replica's kernel does. The forward gives up within the reach
// bound, long before the write's own deadline, with 503 "no leader
// reachable"; and the write's body never went out, so the leader cannot
// apply it when it wakes.
func TestAWriteForwardedToAFrozenLeaderFailsAtOnceAndNeverReachesIt(t *testing.T) {
	dir := certDir(t, "r0", "r1")
	tlsState, err := link.LoadTLS(link.NodeTLSFiles(dir, "r0"))
	if err != nil {
		t.Fatal(err)
	}
	leaderTLS, err := link.LoadTLS(link.NodeTLSFiles(dir, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := link.Open("127.0.0.1:0", nil, tlsState, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	frozen := startFrozenPeer(t, leaderTLS)
	rpc := link.NewClient(port, rpcTimeout)
	defer rpc.Close()
	f := raftnode.NewForwarder(nil, rpc)
	ctx, cancel := context.WithTimeout(context.Background(), admin.DefaultApplyTimeout)
	defer cancel()
	cmd := store.NewAddWorker(store.AddWorker{URL: "http://127.0.0.1:3/frozen-leader-body"})
	start := time.Now()
	_, err = f.Forward(ctx, &raftnode.NotLeaderError{LeaderID: "r1", LeaderAddr: frozen.addr}, cmd)
	t.Logf("the forward failed after %v: %v", time.Since(start), err)
	if !errors.Is(err, raftnode.ErrLeaderUnreachable) || ctx.Err() != nil {
		t.Fatalf("forward = %v (ctx %v), want raftnode.ErrLeaderUnreachable before the write's deadline", err, ctx.Err())
	}
	if status, _ := admin.ErrorStatus(err); status != http.StatusServiceUnavailable || !strings.HasPrefix(admin.ErrorMessage(status, err), "no leader reachable") {
		t.Fatalf("answered %d %q, want 503 no leader reachable", status, admin.ErrorMessage(status, err))
	}
	rpc.Close()
	got := frozen.received(t)
	if !strings.Contains(got, raftnode.ApplyPath) {
		t.Fatalf("the frozen leader's socket got %q, want the request's head", got)
	}
	if strings.Contains(got, "frozen-leader-body") {
		t.Fatalf("the write's body reached the frozen leader's socket: it would apply when it wakes\n%s", got)
	}
}

// frozenPeer is a cluster port that completes the TLS handshake and then
// never writes: what a replica stopped after its connection was pooled
// looks like from the network. It keeps what arrives.
type frozenPeer struct {
	addr string
	got  chan string
}

func startFrozenPeer(t *testing.T, tlsState *link.TLS) *frozenPeer {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsState.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &frozenPeer{addr: ln.Addr().String(), got: make(chan string, 1)}
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			p.got <- err.Error()
			return
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		b, _ := io.ReadAll(conn) // until the forwarder hangs up
		p.got <- string(b)
	}()
	return p
}

// received is what the peer read before the forwarder hung up.
func (p *frozenPeer) received(t *testing.T) string {
	select {
	case s := <-p.got:
		return s
	case <-time.After(time.Minute):
		t.Fatal("the raftnode.Forwarder never hung up on the frozen leader")
		return ""
	}
}
