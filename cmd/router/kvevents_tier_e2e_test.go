package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// tierFormDeadline bounds the wait for a tier of replica processes to form
// and share its registry.
const tierFormDeadline = time.Minute

// startKVTier starts n replicas over ws in KV-event mode when kv is set: the
// first seeds the registry with the workers and their endpoints, the others
// join and read the endpoints from the registry. Every replica takes the
// flags extra too.
func startKVTier(t *testing.T, routerBin string, n int, ws []kvWorker, kv bool, extra ...string) []string {
	t.Helper()
	var urls, eps []string
	for _, w := range ws {
		urls, eps = append(urls, w.url), append(eps, w.endpoint)
	}
	gossip := tierGossipBinds(t, n)
	var procs []*process
	for i := range n {
		args := []string{"serve", "--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0",
			"--gossip-bind", gossip[i], "--data-dir", t.TempDir(), "--node-name", fmt.Sprintf("router-%d", i+1),
			"--bootstrap-expect", fmt.Sprint(n), "--retry-initial-backoff-ms", "1"}
		if kv {
			args = append(args, "--kv-events", "--kv-events-replay-offset", "-1", "--kv-events-stale-after", "1s",
				"--kv-events-reservation", "200ms", "--kv-events-tokenize-timeout", "2s")
		}
		if i > 0 {
			args = append(args, "--join", gossip[0])
		} else {
			args = append(args, "--worker-urls", strings.Join(urls, ","))
			if kv {
				args = append(args, "--kv-events-endpoints", strings.Join(eps, ","))
			}
		}
		procs = append(procs, start(t, routerBin, append(args, extra...)...))
	}
	var routers []string
	for _, p := range procs {
		routers = append(routers, "http://"+p.await(t, `router ready" addr=(\S+)`))
	}
	// A joiner is ready before the registry reaches it, which takes the
	// tier's Raft election and the first seeding: seconds, and more under
	// a loaded -race run (20 s was too short once).
	for _, r := range routers {
		testwait.EventuallyNil(t, tierFormDeadline, func() error {
			if n := len(workerRows(t, r)); n != len(ws) {
				return fmt.Errorf("%d of %d workers listed", n, len(ws))
			}
			return nil
		}, "every worker registered on %s", r)
	}
	return routers
}

// tierPressure is pressure through a tier, request i to replica i mod n,
// its figures summed over the replicas.
func tierPressure(t *testing.T, routers []string, ws []kvWorker, docs, rounds int) (falseHits, judged, ratio float64) {
	t.Helper()
	k := 0
	for r := range rounds {
		for pass := range 2 {
			for d := range docs {
				router := routers[k%len(routers)]
				k++
				if c := complete(t, router, document(d)+fmt.Sprintf(" Question %d.%d?", r, pass), false); c.status != 200 {
					t.Fatalf("status %d: %s", c.status, c.body)
				}
			}
		}
		fillCaches(t, routers, ws, r)
	}
	var prompt, cached float64
	for _, router := range routers {
		falseHits += metric(t, router, "vllm_router_false_hits_total")
		judged += metric(t, router, "vllm_router_judged_decisions_total")
		prompt += metric(t, router, "vllm_router_judged_prompt_tokens_total")
		cached += metric(t, router, "vllm_router_judged_cached_tokens_total")
	}
	return falseHits, judged, cached / prompt
}

// A tier of four on the events: its replicas hear every engine themselves
// and their peers' decisions through the gossip, so it keeps about no false
// hits and the cached-token ratio of one replica.
func TestEndToEndATierOfFourOnKVEventsKeepsOneReplicasResult(t *testing.T) {
	routerBin, workersim := binaries(t)
	const docs, rounds = 6, 3
	tws := kvWorkers(t, workersim, 3)
	textFalse, textJudged, textRatio := tierPressure(t, startKVTier(t, routerBin, 4, tws, false), tws, docs, rounds)
	kws := kvWorkers(t, workersim, 3)
	routers := startKVTier(t, routerBin, 4, kws, true)
	for _, r := range routers {
		testwait.Eventually(t, 20*time.Second, func() bool { s := kvStates(t, r); return len(s) == 3 && allConnected(s) }, "%s", "every stream connected on "+r)
	}
	kvFalse, kvJudged, kvRatio := tierPressure(t, routers, kws, docs, rounds)
	t.Logf("tier of 4: text index %v false hits of %v judged, cached-token ratio %.3f; KV events %v of %v, ratio %.3f",
		textFalse, textJudged, textRatio, kvFalse, kvJudged, kvRatio)
	if kvFalse > kvJudged/50 {
		t.Errorf("KV events in a tier: %v false hits of %v judged, want about none", kvFalse, kvJudged)
	}
	if kvRatio < textRatio-0.01 {
		t.Errorf("KV events in a tier cached %.3f of the prompt tokens, the text index %.3f", kvRatio, textRatio)
	}
}

// TestEndToEndATurnThroughAnotherReplicaRoutesOnTheTokensTheTierKept: a
// conversation's first turn goes through one replica, which tokenizes it
// and gives the tokens to the keeper of the worker it went to; its next
// turn reaches another replica, which has never seen the conversation and
// routes at once on those tokens, asked of the keeper (result "peer"), not
// on an engine's /tokenize.
func TestEndToEndATurnThroughAnotherReplicaRoutesOnTheTokensTheTierKept(t *testing.T) {
	router, workersim := binaries(t)
	ws := kvWorkers(t, workersim, 2)
	routers := startKVTier(t, router, 3, ws, true)
	first := document(0) + " First question?"
	if c := complete(t, routers[0], first, false); c.status != 200 {
		t.Fatalf("first turn: %d %s", c.status, c.body)
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		return metric(t, routers[1], "vllm_router_cluster_gossip_facts_learned_total") > 0 &&
			metric(t, routers[0], "vllm_router_kv_token_share_in_flight") == 0
	}, "the next replica knows where the turn went, and its tokens are with their keeper")
	next := first + strings.Repeat(" The answer was long, and the second question asks about it.", 8)
	if c := complete(t, routers[1], next, false); c.status != 200 {
		t.Fatalf("next turn: %d %s", c.status, c.body)
	}
	if n := metric(t, routers[1], `vllm_router_kv_tokenize_total{result="peer"}`); n != 1 {
		t.Fatalf("the next turn was routed on the kept tokens %v times, want 1 (ok %v, slow %v)", n,
			metric(t, routers[1], `vllm_router_kv_tokenize_total{result="ok"}`), metric(t, routers[1], `vllm_router_kv_tokenize_total{result="slow"}`))
	}
}
