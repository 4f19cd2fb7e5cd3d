package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestMeasureGossip runs 3- and 5-replica clusters in front of 8 workers,
// sends agentic traffic through every replica and prints the gossip lag and
// bandwidth per replica. It is skipped unless CLUSTER_MEASURE=1;
// CLUSTER_MEASURE_SECONDS sets the measured window (default 10) and
// CLUSTER_MEASURE_RPS the requests per second sent to each replica
// (default 50). Each request is a turn of one of 200 conversations per
// replica (a prefix that grows by a block per turn) and takes 50-500 ms at
// the worker, so every worker's in-flight count keeps changing.
func TestMeasureGossip(t *testing.T) {
	if os.Getenv("CLUSTER_MEASURE") != "1" {
		t.Skip("set CLUSTER_MEASURE=1 to measure gossip lag and bandwidth through real replicas")
	}
	seconds, _ := strconv.Atoi(os.Getenv("CLUSTER_MEASURE_SECONDS"))
	rps, _ := strconv.Atoi(os.Getenv("CLUSTER_MEASURE_RPS"))
	window := time.Duration(max(seconds, 10)) * time.Second
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("replicas=%d", size), func(t *testing.T) {
			measureGossip(t, size, max(rps, 50), window)
		})
	}
}

func measureGossip(t *testing.T, size, rps int, window time.Duration) {
	c := &testCluster{t: t, root: t, replicas: map[string]*Replica{}, cfgs: map[string]Config{},
		client: &http.Client{Timeout: testDeadline, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	for i := range 8 {
		c.workers = append(c.workers, &fakeWorker{name: fmt.Sprintf("w%d", i+1), url: slowWorker(t, fmt.Sprintf("w%d", i+1))})
	}
	t.Cleanup(c.stopAll)
	c.startN(size)
	c.waitReady()

	before := map[string]uint64{}
	for name, r := range c.replicas {
		before[name] = r.gossip.current().Stats().BytesSent
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, failed sync.Map
	for name, r := range c.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, bad := drive(c, r, rps, stop)
			sent.Store(name, n)
			failed.Store(name, bad)
		}()
	}
	time.Sleep(window) // the measured window itself, not a wait for a condition
	close(stop)
	wg.Wait()

	var p50s, p99s []time.Duration
	var bytes, requests, errors uint64
	for name, r := range c.replicas {
		lag := r.sync.Lag()
		p50s, p99s = append(p50s, lag.P50), append(p99s, lag.P99)
		bytes += r.gossip.current().Stats().BytesSent - before[name]
		n, _ := sent.Load(name)
		bad, _ := failed.Load(name)
		requests, errors = requests+n.(uint64), errors+bad.(uint64)
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	secs := window.Seconds()
	t.Logf("%d replicas x 8 workers, %d req/s per replica offered (%.0f served, %d errors), %v: "+
		"lag p50 median %v (range %v-%v), p99 worst %v; gossip payload sent %.0f B/s per replica",
		size, rps, float64(requests)/secs/float64(size), errors, window,
		p50s[len(p50s)/2], p50s[0], p50s[len(p50s)-1], p99s[len(p99s)-1], float64(bytes)/secs/float64(size))
}

// drive sends rps completions per second through r until stop, each a turn
// of one of 200 conversations, and returns how many it sent and how many
// failed.
func drive(c *testCluster, r *Replica, rps int, stop <-chan struct{}) (sent, failed uint64) {
	rng := rand.New(rand.NewPCG(uint64(len(r.cfg.NodeName)), uint64(time.Now().UnixNano())))
	turns := map[int]int{}
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return sent, failed
		case <-tick.C:
		}
		conv := rng.IntN(200)
		turns[conv]++
		p := prompt(fmt.Sprintf("%s conversation %d", r.cfg.NodeName, conv), 2+turns[conv])
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"model": "m", "prompt": p})
			resp, err := c.client.Post("http://"+r.HTTPAddr()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
}

// slowWorker serves completions after 50-500 ms, like an engine under load.
func slowWorker(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{MaxIdleWorkerDuration: time.Millisecond, Handler: func(ctx *fasthttp.RequestCtx) {
		if bytes.Equal(ctx.Path(), []byte("/v1/completions")) {
			time.Sleep(time.Duration(50+rand.IntN(450)) * time.Millisecond) // simulated service time
		}
		ctx.Response.Header.Set("x-worker-id", name)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"choices":[{"text":"ok"}]}`)
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); _ = ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}
