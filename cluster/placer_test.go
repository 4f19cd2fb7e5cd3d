package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// placerOn gives every replica the placer, as --placer does, with an ask
// bound that a loaded -race run does not reach (the failure path has its
// own test).
func placerOn(c *Config) { c.Placer, c.PlacerTimeout = true, testDeadline }

// burstThroughFollowers sends n new sessions' first turns at once, each
// held at its worker, through the followers in turn, waits until every one
// was decided, lets them finish and returns the workers that took them.
func burstThroughFollowers(c *testCluster, n int, decided func() int) []string {
	c.t.Helper()
	lead := c.leader()
	var followers []*Replica
	for _, r := range c.replicas {
		if r != lead {
			followers = append(followers, r)
		}
	}
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = c.complete(followers[i%len(followers)], prompt(fmt.Sprintf("hold session %d", i), 4))
		}()
	}
	testwait.Eventually(c.t, testDeadline, func() bool { return decided() == n }, "%d cold requests decided", n)
	// A request decided but not yet at its worker would be held again
	// after the release: wait until all n are there.
	testwait.Eventually(c.t, testDeadline, func() bool {
		var held int64
		for _, w := range c.workers {
			held += w.held.Load()
		}
		return held == int64(n)
	}, "%d requests held at their workers", n)
	c.releaseAll()
	wg.Wait()
	return got
}

// TestFollowersAskTheLeaderToPlaceABurstOfColdRequests: four new sessions
// reach two followers in the same instant, before either hears of the
// other's. Each follower asks the leader, which counts the ones it placed
// before, so the four take four workers, as one replica would place them;
// the followers count them as asked, the leader as placed for a peer.
func TestFollowersAskTheLeaderToPlaceABurstOfColdRequests(t *testing.T) {
	const n = 4
	c := newTestCluster(t, n)
	c.startN(3, placerOn)
	c.waitReady()
	lead := c.leader()
	asked := func() int {
		total := 0
		for _, r := range c.replicas {
			total += int(r.placer.counts.asked.Get())
		}
		return total
	}
	got := burstThroughFollowers(c, n, asked)
	if slices.Sort(got); len(slices.Compact(slices.Clone(got))) != n {
		t.Errorf("the burst took workers %v, want %d different ones", got, n)
	}
	if p := lead.placer.counts.placedForPeers.Get(); p != n {
		t.Errorf("the leader placed %d requests for peers, want %d", p, n)
	}
	// Its holds end when the askers' load reports count the requests
	// (within milliseconds here), or at the bound on a machine slow enough.
	testwait.Eventually(t, testDeadline, func() bool {
		byReport, byBound := lead.core.HoldsEnded()
		return byReport+byBound == n
	}, "the leader's %d holds ended", n)
	if byReport, byBound := lead.core.HoldsEnded(); byReport == 0 {
		t.Errorf("no hold ended by an asker's report (%d by the bound)", byBound)
	}
	for _, r := range c.replicas {
		if a := r.placer.counts.alone.Get(); a != 0 {
			t.Errorf("%s decided %d cold requests alone, want none with a leader that answers", r.cfg.NodeName, a)
		}
	}
}

// TestOnlyTheLeaderAnswersAsThePlacer: a follower asked to place refuses,
// so that an asker whose view of the leader is stale decides alone rather
// than on a second view; bad questions are refused on the leader.
func TestOnlyTheLeaderAnswersAsThePlacer(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(2, placerOn)
	c.waitReady()
	lead, follower := c.leader(), c.follower()
	call := func(to *Replica, body []byte) int {
		status, _, err := follower.rpc.Call(t.Context(), http.MethodPost, to.RaftAddr(), placePath, body)
		if err != nil {
			t.Fatal(err)
		}
		return status
	}
	q := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0} // version, full 0, tail, text 64, no hashes, no candidates
	if s := call(follower, q); s != http.StatusConflict {
		t.Errorf("a follower asked to place answered %d, want 409", s)
	}
	if s := call(lead, []byte("not a question")); s != http.StatusBadRequest {
		t.Errorf("the leader asked a malformed question answered %d, want 400", s)
	}
}

// TestAnAskerWithoutAnAnsweringPlacerDecidesAlone drives the placer's
// failure paths from the asking side: no leader known, a leader that
// accepts the question and never answers (a stalled replica), and a
// replica that no longer leads (409). Each time the request is decided
// here, within the ask's bound, and counted as alone.
func TestAnAskerWithoutAnAnsweringPlacerDecidesAlone(t *testing.T) {
	c := newTestCluster(t, 2)
	c.startN(2, placerOn)
	c.waitReady()
	follower := c.follower()
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := stalled.Accept()
			if err != nil {
				return
			}
			held = append(held, conn) // read nothing, answer nothing
		}
	}()
	defer func() {
		stalled.Close()
		<-accepted
		for _, conn := range held {
			conn.Close()
		}
	}()
	var ids []*affinity.Load
	for _, w := range c.workers {
		ids = append(ids, follower.loads.Get(c.workerID(follower, w.name)))
	}
	pool := affinity.NewPool(ids)
	router := follower.proxy.DecidingRouter()
	for name, leader := range map[string]string{
		"no leader":              "",
		"a stalled leader":       stalled.Addr().String(),
		"a replica that follows": follower.RaftAddr(),
	} {
		set := metrics.NewSet()
		counts := newPlacerCounts(set)
		quick := link.NewQuick(follower.raft.Port())
		defer quick.Close()
		p := askingOf(t, follower, leader, quick, counts, 0)
		start := time.Now()
		d, g, err := p.Decide(router, router.Prepare("m", []byte(prompt(name, 4)), 0), pool)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g.Release()
		if took := time.Since(start); took > testDeadline {
			t.Errorf("%s: the decision took %v", name, took)
		}
		if !pool.Contains(d.Worker) || counts.alone.Get() != 1 || counts.asked.Get() != 0 {
			t.Errorf("%s: worker %d, alone %d, asked %d; want a candidate decided alone", name, d.Worker,
				counts.alone.Get(), counts.asked.Get())
		}
		if leader == stalled.Addr().String() {
			// The question that went unanswered is timed, bound and all.
			if n, sum := askSamples(t, set); n != 1 || sum < core.DefaultPlacerTimeout.Seconds() {
				t.Errorf("%s: %v questions timed, %v s in all; want one of at least the %v bound", name, n, sum, core.DefaultPlacerTimeout)
			}
			decideAgainWithoutAsking(t, p, set, pool)
		}
	}
}

// decideAgainWithoutAsking: after the placer left a question unanswered,
// the next cold request is decided alone at once, without putting a
// question to that placer again (none more is timed in set).
func decideAgainWithoutAsking(t *testing.T, p *placing, set *metrics.Set, pool *affinity.Pool) {
	t.Helper()
	router := p.router()
	d, g, err := p.Decide(router, router.Prepare("m", []byte(prompt("again", 4)), 0), pool)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if n, _ := askSamples(t, set); n != 1 || !pool.Contains(d.Worker) || p.counts.alone.Get() != 2 {
		t.Errorf("the next cold request: %v questions put in all, worker %d, alone %d; want 1, a candidate, 2", n, d.Worker, p.counts.alone.Get())
	}
}

// askingOf is r's Decider with a placer at leader ("" none), which r does
// not take itself for, asking through rpc within timeout (0: the default)
// and counting in counts.
func askingOf(t *testing.T, r *Replica, leader string, rpc *link.Quick, counts *placerCounts, timeout time.Duration) *placing {
	t.Helper()
	placement, err := r.core.NewPlacement(core.PlacementConfig{IsPlacer: func() bool { return false },
		Placer: func() string { return leader }, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return &placing{Replica: r.core, placement: placement, rpc: rpc, router: r.proxy.DecidingRouter, counts: counts}
}

// askSamples reads the count and sum of the placer's question times in set.
func askSamples(t *testing.T, set *metrics.Set) (count, sum float64) {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		name, v, _ := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil:
		case name == "vllm_router_cluster_placer_ask_seconds_count":
			count = f
		case name == "vllm_router_cluster_placer_ask_seconds_sum":
			sum = f
		}
	}
	return count, sum
}

// TestAPlacerThatAnsweredSinceIsAskedAgainAfterASlowQuestion: one question
// meets a queue at the placer (a burst of new sessions on a loaded host)
// and runs out its bound while the placer answers another: that request is
// decided alone, but the placer is alive, and the next question is put to
// it, not decided alone for placerQuiet as with a placer that answers
// nothing.
func TestAPlacerThatAnsweredSinceIsAskedAgainAfterASlowQuestion(t *testing.T) {
	c := newTestCluster(t, 1)
	c.startN(1)
	c.waitReady()
	r := c.leader()
	var ids []*affinity.Load
	for _, w := range c.workers {
		ids = append(ids, r.loads.Get(c.workerID(r, w.name)))
	}
	pool := affinity.NewPool(ids)
	placed := pool.At(0).ID()
	queued, release := make(chan struct{}), make(chan struct{})
	var questions atomic.Int32
	addr := servePlacer(t, func(ctx *fasthttp.RequestCtx) {
		if questions.Add(1) == 1 {
			close(queued)
			<-release
		}
		ctx.SetBody(core.AppendPlacement(nil, affinity.Decision{Worker: placed}))
	})
	defer close(release)
	quick := link.NewQuick(r.raft.Port())
	defer quick.Close()
	counts := newPlacerCounts(metrics.NewSet())
	p := askingOf(t, r, addr, quick, counts, 2*time.Second)
	router := p.router()
	decide := func(name string) affinity.WorkerID {
		d, g, err := p.Decide(router, router.Prepare("m", []byte(prompt(name, 4)), 0), pool)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g.Release()
		return d.Worker
	}
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		decide("the question that meets a queue")
	}()
	<-queued
	if w := decide("a question answered meanwhile"); w != placed || counts.asked.Get() != 1 {
		t.Fatalf("the question put while another waited: worker %d, asked %d; want %d, 1", w, counts.asked.Get(), placed)
	}
	<-slow
	if counts.alone.Get() != 1 {
		t.Fatalf("the question past its bound: alone %d, want 1", counts.alone.Get())
	}
	if w := decide("the next question"); w != placed || counts.asked.Get() != 2 {
		t.Errorf("the next question: worker %d, asked %d, alone %d; want it put to the placer, which answered lately",
			w, counts.asked.Get(), counts.alone.Get())
	}
}

// servePlacer serves h as a placer's cluster port until the test ends and
// returns its address.
func servePlacer(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	port, err := link.Open("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		link.Serve(ctx, port.RPCListener(), h, link.ServerLimits{Timeout: time.Minute, MaxBody: 1 << 20})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = port.Close()
	})
	return port.Addr().String()
}

// requestLines collects the request log lines of one replica (JSON).
type requestLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (s *requestLines) Write(p []byte) (int, error) {
	var m map[string]any
	if json.Unmarshal(p, &m) == nil && m["msg"] == "request" {
		s.mu.Lock()
		s.lines = append(s.lines, m)
		s.mu.Unlock()
	}
	return len(p), nil
}

// nth is the n-th line (from 1), nil before it is written.
func (s *requestLines) nth(n int) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lines) < n {
		return nil
	}
	return s.lines[n-1]
}

// TestTheRequestLogSaysWhoPlacedEachDecisionOnWhatFact: an operator reading
// one request's log line learns who chose its worker and what the replica
// knew. A new conversation through a follower is placed by the leader
// (via=asked, fact=none); one through the leader by the leader itself
// (via=placer); the follower's next turn of its conversation, whose prefix
// it recorded, is decided where it arrived on its own fact (via=here,
// fact=own).
func TestTheRequestLogSaysWhoPlacedEachDecisionOnWhatFact(t *testing.T) {
	c := newTestCluster(t, 2)
	sinks := map[string]*requestLines{}
	c.startN(2, placerOn, func(cfg *Config) {
		s := &requestLines{}
		sinks[cfg.NodeName] = s
		cfg.Logger = slog.New(slog.NewJSONHandler(s, nil))
	})
	c.waitReady()
	lead, follower := c.leader(), c.follower()
	// want checks r's n-th request line.
	want := func(r *Replica, n int, what, via, fact string) {
		t.Helper()
		var line map[string]any
		testwait.Eventually(t, testDeadline, func() bool { line = sinks[r.cfg.NodeName].nth(n); return line != nil },
			"the log line of %s", what)
		if line["via"] != via || line["fact"] != fact {
			t.Errorf("%s: the log line says via=%v fact=%v, want via=%s fact=%s (%v)", what, line["via"], line["fact"], via, fact, line)
		}
	}
	turn := prompt("a conversation through the follower", 4)
	c.complete(follower, turn)
	want(follower, 1, "a new conversation through the follower", "asked", "none")
	c.complete(follower, turn+prompt("its next turn", 2))
	want(follower, 2, "its next turn through the same follower", "here", "own")
	c.complete(lead, prompt("a conversation through the leader", 4))
	want(lead, 1, "a new conversation through the leader", "placer", "none")
}
