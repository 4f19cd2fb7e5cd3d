package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// fakeWorker is a loopback worker that names itself in x-worker-id and
// holds every request whose body contains "hold" (every completion while
// wedged) until release is called, so a test can keep requests in flight on
// it.
type fakeWorker struct {
	name   string
	url    string
	mu     sync.Mutex
	gate   chan struct{}
	wedged bool
	down   atomic.Bool    // every request answered 503, health checks included
	held   atomic.Int64   // requests that have reached the gate, released or not
	probes map[string]int // GETs received, by path: a replica's own health endpoint tells its probes apart
}

func startFakeWorker(t *testing.T, name string) *fakeWorker {
	t.Helper()
	w := &fakeWorker{name: name, gate: make(chan struct{}), probes: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{MaxIdleWorkerDuration: time.Millisecond, Handler: w.serve}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	// Closing ln too ends a Serve that Shutdown came too early for.
	t.Cleanup(func() { w.release(); _ = srv.Shutdown(); _ = ln.Close(); <-done })
	w.url = "http://" + ln.Addr().String()
	return w
}

func (w *fakeWorker) serve(ctx *fasthttp.RequestCtx) {
	if ctx.IsGet() {
		w.mu.Lock()
		w.probes[string(ctx.Path())]++
		w.mu.Unlock()
	}
	if w.down.Load() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		return
	}
	w.mu.Lock()
	gate, wedged := w.gate, w.wedged
	w.mu.Unlock()
	if bytes.Contains(ctx.PostBody(), []byte("hold")) || wedged && ctx.IsPost() {
		w.held.Add(1)
		<-gate
	}
	ctx.Response.Header.Set("x-worker-id", w.name)
	ctx.SetContentType("application/json")
	if bytes.Contains(ctx.PostBody(), []byte(evictsEverything)) {
		// An engine whose cache holds nothing of any prompt, and says so.
		ctx.SetBodyString(`{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":512,"completion_tokens":1,` +
			`"prompt_tokens_details":{"cached_tokens":0}}}`)
		return
	}
	ctx.SetBodyString(`{"choices":[{"text":"ok"}],"usage":{"completion_tokens":1}}`)
}

// probesAt is how many GETs of path the worker has received.
func (w *fakeWorker) probesAt(path string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.probes[path]
}

// evictsEverything in a prompt makes the fake worker answer that it found
// none of the prompt's tokens cached.
const evictsEverything = "evicts-everything"

// releaseAll lets every request held by any worker finish.
func (c *testCluster) releaseAll() {
	for _, w := range c.workers {
		w.release()
	}
}

// release lets every held request finish; later ones are held again.
// It ends a wedge.
func (w *fakeWorker) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.gate)
	w.gate = make(chan struct{})
	w.wedged = false
}

// wedge makes the worker hold every completion, recovery probes included,
// until release.
func (w *fakeWorker) wedge() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wedged = true
}

// testCluster is a set of in-process replicas on loopback ports, with the
// fake workers they route to.
type testCluster struct {
	// t is the test or subtest that reports failures; root owns the
	// data dirs and the cleanup.
	t, root  *testing.T
	workers  []*fakeWorker
	replicas map[string]*Replica
	cfgs     map[string]Config
	client   *http.Client
	opts     []clusterOptions // what startN applied, for replicas started later
}

// clusterOptions adjusts every replica's config.
type clusterOptions func(*Config)

func newTestCluster(t *testing.T, workers int) *testCluster {
	c := &testCluster{t: t, root: t, replicas: map[string]*Replica{}, cfgs: map[string]Config{},
		client: &http.Client{Timeout: testDeadline, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	for i := range workers {
		c.workers = append(c.workers, startFakeWorker(t, fmt.Sprintf("w%d", i+1)))
	}
	t.Cleanup(c.stopAll)
	return c
}

// config is a replica config for this cluster: node name, a fresh data dir,
// every fake worker as a seed, quick membership timings.
func (c *testCluster) config(name string, expect int, join []string, opts ...clusterOptions) Config {
	var seeds []string
	for _, w := range c.workers {
		seeds = append(seeds, w.url)
	}
	cfg := testConfig(c.t, c.root.TempDir(), seeds...)
	cfg.NodeName, cfg.BootstrapExpect, cfg.Join = name, expect, join
	cfg.RaftAdvertise, cfg.GossipAdvertise = "", ""
	cfg.GossipLocal = true
	cfg.ReapTimeout = 3 * time.Second
	cfg.Stabilization = time.Second // promotions as prompt as the reaping
	cfg.JoinTimeout = time.Second
	cfg.ReconcileInterval = 100 * time.Millisecond
	for _, o := range append(slices.Clone(c.opts), opts...) {
		o(&cfg)
	}
	return cfg
}

// start starts a replica from cfg and remembers it under its node name.
func (c *testCluster) start(cfg Config) *Replica {
	c.t.Helper()
	r, err := Start(context.Background(), cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.NodeName, err)
	}
	c.replicas[cfg.NodeName], c.cfgs[cfg.NodeName] = r, cfg
	return r
}

// startN starts replicas r0..r(n-1) expecting n voters, joined through r0.
func (c *testCluster) startN(n int, opts ...clusterOptions) {
	c.t.Helper()
	c.opts = opts
	first := c.start(c.config("r0", n, nil))
	for i := 1; i < n; i++ {
		c.start(c.config(fmt.Sprintf("r%d", i), n, []string{first.GossipAddr()}))
	}
}

// stop stops a replica; leave=false crashes it (no gossip leave).
func (c *testCluster) stop(name string, leave bool) {
	c.t.Helper()
	r := c.replicas[name]
	if r == nil {
		c.t.Fatalf("no live replica %s", name)
	}
	delete(c.replicas, name)
	if err := r.stop(context.Background(), leave); err != nil {
		c.t.Logf("stop %s: %v", name, err)
	}
}

// restart starts a stopped replica again from its data dir. sameAddrs keeps
// its ports; otherwise it comes back at new ones.
func (c *testCluster) restart(name string, sameAddrs bool, old *Replica) *Replica {
	c.t.Helper()
	cfg := c.cfgs[name]
	if sameAddrs {
		cfg.HTTPAddr, cfg.RaftBind, cfg.GossipBind = old.HTTPAddr(), old.RaftAddr(), old.GossipAddr()
	}
	cfg.Join = []string{c.anyLive(name).GossipAddr()}
	return c.start(cfg)
}

func (c *testCluster) anyLive(except string) *Replica {
	for name, r := range c.replicas {
		if name != except {
			return r
		}
	}
	c.t.Fatal("no live replica")
	return nil
}

func (c *testCluster) stopAll() {
	c.t = c.root
	for name := range c.replicas {
		c.stop(name, true)
	}
	c.client.CloseIdleConnections()
	waitMemberlistGone(c.t)
}

// waitMemberlistGone waits until no memberlist goroutine is left: a probe
// in flight when a node shuts down ends only at its timeout, up to a second
// later, and the package's leak check would count it.
func waitMemberlistGone(t *testing.T) {
	buf := make([]byte, 8<<20)
	testwait.Eventually(t, testDeadline, func() bool {
		n := runtime.Stack(buf, true)
		return !bytes.Contains(buf[:n], []byte("github.com/hashicorp/memberlist."))
	}, "memberlist's goroutines end")
}

// leader returns the replica that leads, once all live replicas agree on it.
func (c *testCluster) leader() *Replica {
	c.t.Helper()
	var lead *Replica
	testwait.Eventually(c.t, testDeadline, func() bool {
		lead = nil
		var id string
		for _, r := range c.replicas {
			got, _ := r.raft.Leader()
			if got == "" || id != "" && got != id {
				return false
			}
			id = got
		}
		lead = c.replicas[id]
		return lead != nil
	}, "every replica knows the same leader")
	return lead
}

// follower returns a live replica that does not lead.
func (c *testCluster) follower() *Replica {
	lead := c.leader()
	for _, r := range c.replicas {
		if r != lead {
			return r
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitRegistryEverywhere waits until every live replica's registry holds
// cond.
func (c *testCluster) waitRegistryEverywhere(what string, cond func(*store.Registry) bool) {
	c.t.Helper()
	for name, r := range c.replicas {
		testwait.Eventually(c.t, testDeadline, func() bool { return cond(r.fsm.View()) }, "%s: %s", name, what)
	}
}

// waitReady waits until every replica has every worker registered and
// answers /readiness.
func (c *testCluster) waitReady() {
	c.t.Helper()
	c.waitRegistryEverywhere("every worker registered", func(reg *store.Registry) bool { return reg.Len() == len(c.workers) })
	for name, r := range c.replicas {
		testwait.Eventually(c.t, testDeadline, func() bool { return c.get(r, "/readiness").Status == http.StatusOK }, "%s ready", name)
	}
}

// complete sends a completion for prompt through r and returns the worker
// that answered.
func (c *testCluster) complete(r *Replica, prompt string) string {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt})
	resp, err := c.client.Post("http://"+r.HTTPAddr()+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Errorf("completion through %s: %v", r.cfg.NodeName, err)
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Errorf("completion through %s: status %d", r.cfg.NodeName, resp.StatusCode)
	}
	return resp.Header.Get("x-worker-id")
}

func (c *testCluster) get(r *Replica, path string) admintest.Reply {
	return c.do(r, http.MethodGet, path, "")
}

func (c *testCluster) do(r *Replica, method, path, body string) admintest.Reply {
	c.t.Helper()
	return admintest.NewClient(c.t, "http://"+r.HTTPAddr(), c.client).Do(method, path, body)
}

// workerID is the registry id of the fake worker named name, as r sees it.
func (c *testCluster) workerID(r *Replica, name string) affinity.WorkerID {
	c.t.Helper()
	for _, w := range c.workers {
		if w.name == name {
			reg, _ := r.fsm.View().WorkerByURL(w.url)
			return affinity.WorkerID(reg.ID)
		}
	}
	c.t.Fatalf("no worker %s", name)
	return 0
}

// knowsPrefix reports whether r's index says worker owns the deepest block
// of prompt.
func knowsPrefix(r *Replica, prompt string, worker affinity.WorkerID) bool {
	hashes := affinity.BlockHashes(nil, "m", []byte(prompt), r.cfg.Routing.BlockSize)
	last := hashes[len(hashes)-1:]
	pool := affinity.NewPool([]*affinity.Load{r.loads.Get(worker)})
	depth, _ := r.index.Match(last, pool, nil)
	return depth == 0
}

// prompt returns a prompt of n blocks of 256 bytes, unique to key.
func prompt(key string, blocks int) string {
	unit := strings.Repeat(key+" says hello to the cluster; ", 256/len(key+" says hello to the cluster; ")+1)[:256]
	return strings.Repeat(unit, blocks)
}

// loadsOf returns r's merged and local in-flight counts of worker.
func loadsOf(r *Replica, worker affinity.WorkerID) (merged, local int64) {
	l := r.loads.Get(worker)
	return l.Merged(), l.Local()
}
