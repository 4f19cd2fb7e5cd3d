package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// kvWorker is a workersim process publishing its KV events, with a small
// cache (2,048 tokens: about three of the test's documents).
type kvWorker struct {
	proc     *process
	url      string
	endpoint string
}

const kvPressureTokens = "2048"

func startKVWorker(t *testing.T, bin, id string, args ...string) kvWorker {
	t.Helper()
	p, u := startWorkersim(t, bin, id, append([]string{"--kv-capacity-tokens", kvPressureTokens,
		"--kv-events-endpoint", "tcp://127.0.0.1:0"}, args...)...)
	ep := p.await(t, `^publishing KV events on (tcp://\S+?),?\s`)
	return kvWorker{proc: p, url: u, endpoint: ep}
}

// kvWorkers starts n publishing workersims.
func kvWorkers(t *testing.T, bin string, n int) []kvWorker {
	t.Helper()
	var ws []kvWorker
	for i := range n {
		ws = append(ws, startKVWorker(t, bin, fmt.Sprint("w", i)))
	}
	return ws
}

// kvRouter starts a router over ws, in KV-event mode when kv is set. The
// engines have no replay socket here (their ports are ephemeral), so a gap
// empties a set; reservations are short, as the requests are sequential
// and quick.
func kvRouter(t *testing.T, bin string, ws []kvWorker, kv bool) string {
	t.Helper()
	var urls, eps []string
	for _, w := range ws {
		urls, eps = append(urls, w.url), append(eps, w.endpoint)
	}
	args := []string{"--worker-urls", strings.Join(urls, ","), "--policy", "cache_aware"}
	if kv {
		args = append(args, "--kv-events", "--kv-events-endpoints", strings.Join(eps, ","), "--kv-events-replay-offset", "-1",
			"--kv-events-stale-after", "1s", "--kv-events-reservation", "200ms", "--kv-events-tokenize-timeout", "2s")
	}
	return startRouterProcess(t, bin, args...)
}

type kvWorkerRow struct {
	URL      string `json:"url"`
	KVEvents *struct {
		State   string `json:"state"`
		Blocks  int    `json:"blocks"`
		Rewinds uint64 `json:"Rewinds"`
		Lost    uint64 `json:"Lost"`
	} `json:"kv_events"`
}

// workerRows is the router's /cluster/workers.
func workerRows(t *testing.T, router string) []kvWorkerRow {
	t.Helper()
	resp, err := http.Get(router + "/cluster/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Workers []kvWorkerRow }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Workers
}

// kvStates is each worker's event state in the router's /cluster/workers.
func kvStates(t *testing.T, router string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, w := range workerRows(t, router) {
		if w.KVEvents != nil {
			out[w.URL] = w.KVEvents.State
		}
	}
	return out
}

// document is a long prompt of its own, shared by every turn about it.
func document(i int) string {
	return strings.Repeat(fmt.Sprintf("Document %d, section of a long shared context that a chat keeps. ", i), 36)
}

// pressure sends rounds of docs documents through the router, each twice,
// then fills every worker's cache with prompts sent to it directly (another
// client of the engine, which the router never sees), and returns the
// router's false hits, judged decisions and cached-token ratio. The
// documents fit the caches; the direct prompts evict them.
func pressure(t *testing.T, router string, ws []kvWorker, docs, rounds int) (falseHits, judged, ratio float64) {
	t.Helper()
	for r := range rounds {
		for pass := range 2 {
			for d := range docs {
				if c := complete(t, router, document(d)+fmt.Sprintf(" Question %d.%d?", r, pass), false); c.status != 200 {
					t.Fatalf("status %d: %s", c.status, c.body)
				}
			}
		}
		fillCaches(t, []string{router}, ws, r)
	}
	falseHits = metric(t, router, "vllm_router_false_hits_total")
	judged = metric(t, router, "vllm_router_judged_decisions_total")
	ratio = metric(t, router, "vllm_router_judged_cached_tokens_total") / metric(t, router, "vllm_router_judged_prompt_tokens_total")
	t.Logf("%s: predicted hits %v, engine hits %v, cold misses %v", router, metric(t, router, "vllm_router_predicted_hits_total"),
		metric(t, router, "vllm_router_engine_hits_total"), metric(t, router, "vllm_router_cold_misses_total"))
	return falseHits, judged, ratio
}

// fillCaches fills every worker's cache with prompts sent to it directly,
// the batch jobs of round r, and waits until every router on the engines'
// events has heard every batch each engine published: the next round is
// decided on what the engines hold, as turns seconds apart are, not in a
// race with the evictions' events on a loaded machine (there a replica
// once heard an eviction after the next turn's decision).
func fillCaches(t *testing.T, routers []string, ws []kvWorker, r int) {
	t.Helper()
	for i, w := range ws {
		for n := range 2 {
			complete(t, w.url, strings.Repeat(fmt.Sprintf("Unrelated batch job %d/%d/%d filling the cache. ", r, i, n), 120), false)
		}
	}
	for _, w := range ws {
		published, said := scrapedMetric(w.url, "workersim_kv_events_next_sequence")
		if !said {
			t.Fatalf("%s does not say how many KV event batches it published", w.url) // a wait on it would pass at once
		}
		for _, router := range routers {
			testwait.Eventually(t, 20*time.Second, func() bool {
				row, onEvents := kvRows(t, router)[w.url]
				return !onEvents || float64(row.Next) >= published
			}, "%s heard the batches %s published", router, w.url)
		}
	}
}

// Under KV pressure the router does not see all of (another client of the
// engines), the text index believes in prefixes the engines evicted (false
// hits); routing on the engines' events does not.
func TestEndToEndKVEventsRouteWithoutFalseHitsUnderKVPressure(t *testing.T) {
	routerBin, workersim := binaries(t)
	const docs, rounds = 6, 3

	tws := kvWorkers(t, workersim, 3)
	text := kvRouter(t, routerBin, tws, false)
	textFalse, textJudged, textRatio := pressure(t, text, tws, docs, rounds)

	kws := kvWorkers(t, workersim, 3)
	router := kvRouter(t, routerBin, kws, true)
	testwait.Eventually(t, 20*time.Second, func() bool {
		s := kvStates(t, router)
		return len(s) == 3 && allConnected(s)
	}, "%s", "every stream connected")
	kvFalse, kvJudged, kvRatio := pressure(t, router, kws, docs, rounds)
	t.Logf("KV: %v requests routed with tokens, candidates on events %v, on text %v, reserved %v; streams %v", metric(t, router, "vllm_router_kv_routed_requests"),
		metric(t, router, `vllm_router_kv_matched_candidates{on="events"}`), metric(t, router, `vllm_router_kv_matched_candidates{on="text"}`),
		metric(t, router, `vllm_router_kv_matched_candidates{on="reserved"}`), kvStates(t, router))
	t.Logf("text index: %v false hits of %v judged, cached-token ratio %.3f; KV events: %v of %v, ratio %.3f",
		textFalse, textJudged, textRatio, kvFalse, kvJudged, kvRatio)
	if textJudged == 0 || kvJudged == 0 {
		t.Fatal("no decision was judged: the engines' answers carry no cached tokens")
	}
	if textFalse == 0 {
		t.Fatal("the text index made no false hit: the caches are not under pressure, the test shows nothing")
	}
	if kvFalse > kvJudged/50 {
		t.Errorf("KV events: %v false hits of %v judged, want about none", kvFalse, kvJudged)
	}
	if kvRatio < textRatio-0.01 {
		t.Errorf("KV events cached %.3f of the prompt tokens, the text index %.3f", kvRatio, textRatio)
	}
	if metric(t, router, `vllm_router_kv_tokenize_total{result="ok"}`) == 0 {
		t.Error("no prompt was tokenized by an engine")
	}
	p50, p99 := bucketQuantiles(t, router, "vllm_router_kv_tokenize_duration_seconds")
	t.Logf("tokenization: %v asked, %v cached, %v slow, %v failed; engine latency p50 <= %vs, p99 <= %vs",
		metric(t, router, `vllm_router_kv_tokenize_total{result="ok"}`), metric(t, router, `vllm_router_kv_tokenize_total{result="cached"}`),
		metric(t, router, `vllm_router_kv_tokenize_total{result="slow"}`), metric(t, router, `vllm_router_kv_tokenize_total{result="failed"}`), p50, p99)
}

// allConnected says every stream is connected: trusted, or unheard (an
// engine that has published nothing yet is not trusted as an empty cache).
func allConnected(states map[string]string) bool {
	for _, s := range states {
		if s != "trusted" && s != "unheard" {
			return false
		}
	}
	return true
}

// An engine that stops publishing while it has work, and one restarted at
// the same address, each fall back to the text index visibly and recover.
func TestEndToEndAnEngineThatGoesQuietOrRestartsFallsBackVisiblyAndRecovers(t *testing.T) {
	routerBin, workersim := binaries(t)
	ws := kvWorkers(t, workersim, 2)
	router := kvRouter(t, routerBin, ws, true)
	testwait.Eventually(t, 20*time.Second, func() bool { s := kvStates(t, router); return len(s) == 2 && allConnected(s) }, "%s", "every stream connected")

	quiet := ws[0]
	n := 0
	work := func() { n++; complete(t, router, document(100+n), false) } // cold prompts: some go to each engine
	// Heard first: an engine that never published is unheard, not stale.
	until(t, router, quiet.url, "trusted", work)
	if resp, err := http.Post(quiet.url+"/admin/fault", "application/json", strings.NewReader(`{"mode":"mute_kv_events"}`)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	until(t, router, quiet.url, "stale", work)
	if resp, err := http.Post(quiet.url+"/admin/fault", "application/json", strings.NewReader(`{"mode":"none"}`)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	until(t, router, quiet.url, "trusted", work)

	restarted := ws[1]
	restarted.proc.kill()
	port := restarted.url[strings.LastIndex(restarted.url, ":")+1:]
	again := startKVWorker(t, workersim, "w1-again", "--port", port, "--kv-events-endpoint", restarted.endpoint)
	if again.url != restarted.url {
		t.Fatalf("restarted at %s, not %s", again.url, restarted.url)
	}
	until(t, router, restarted.url, "!trusted", work)
	until(t, router, restarted.url, "trusted", work)
}

// until sends work until the router shows worker's stream in state ("!s":
// any other state than s).
func until(t *testing.T, router, worker, state string, work func()) {
	t.Helper()
	testwait.Eventually(t, 20*time.Second, func() bool {
		work()
		s := kvStates(t, router)[worker]
		if not, ok := strings.CutPrefix(state, "!"); ok {
			return s != "" && s != not
		}
		return s == state
	}, "%s", worker+"'s stream "+state)
}

// bucketQuantiles reads a histogram of base's /metrics and returns the upper
// bounds of the buckets that hold its median and 99th percentile.
func bucketQuantiles(t *testing.T, base, family string) (p50, p99 string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	type bucket struct {
		le    string
		count float64
	}
	var buckets []bucket
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, family+`_bucket{le="`)
		if !ok {
			continue
		}
		le, value, _ := strings.Cut(rest, `"} `)
		var n float64
		fmt.Sscan(value, &n)
		buckets = append(buckets, bucket{le, n})
	}
	if len(buckets) == 0 {
		return "?", "?"
	}
	total := buckets[len(buckets)-1].count
	p50, p99 = "+Inf", "+Inf"
	for i := len(buckets) - 1; i >= 0; i-- {
		if buckets[i].count >= 0.5*total {
			p50 = buckets[i].le
		}
		if buckets[i].count >= 0.99*total {
			p99 = buckets[i].le
		}
	}
	return p50, p99
}
