package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func fakes(t *testing.T, prefix string, n int) []*fakeworker.Worker {
	var ws []*fakeworker.Worker
	for i := range n {
		ws = append(ws, startFake(t, fmt.Sprintf("%s%d", prefix, i+1)))
	}
	return ws
}

func lastJSON(t *testing.T, w *fakeworker.Worker) map[string]any {
	t.Helper()
	var m map[string]any
	body := w.LastBody()
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s got %q: %v", w.Name, body, err)
	}
	return m
}

// TestPDProtocolFieldsOnBothPhases pins the vLLM (NIXL) protocol: the
// prefill gets one token, no streaming and a remote-decode request; the
// decode gets the original request with the prefill's transfer parameters.
func TestPDProtocolFieldsOnBothPhases(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	body := `{"model":"m","prompt":"hello","max_tokens":50,"max_completion_tokens":50,"stream":false,"stream_options":{"include_usage":true}}`
	resp, out := post(t, r.url, "/v1/completions", body)
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "d1" {
		t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get("x-worker-id"), out)
	}
	p := lastJSON(t, prefill[0])
	kv, _ := p["kv_transfer_params"].(map[string]any)
	if p["max_tokens"] != 1.0 || p["max_completion_tokens"] != 1.0 || p["stream"] != false || p["stream_options"] != nil ||
		kv["do_remote_decode"] != true || kv["do_remote_prefill"] != false || kv["remote_engine_id"] != nil {
		t.Fatalf("prefill request %v", p)
	}
	d := lastJSON(t, decode[0])
	dkv, _ := d["kv_transfer_params"].(map[string]any)
	if d["max_tokens"] != 50.0 || dkv["remote_engine_id"] != "p1" || dkv["do_remote_prefill"] != true {
		t.Fatalf("decode request %v", d)
	}
	if r.totalLoad() != 0 {
		t.Fatalf("load %d after the request", r.totalLoad())
	}
}

func TestPDStreamsThroughDecode(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	resp, out := post(t, r.url, "/v1/completions", completion("hi", true))
	if resp.StatusCode != 200 || !strings.HasSuffix(out, "data: [DONE]\n\n") || strings.Count(out, "data:") != 4 {
		t.Fatalf("status %d: %q", resp.StatusCode, out)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "loads back to zero")
}

func TestPDGrowingPromptStaysOnOnePrefillWorker(t *testing.T) {
	prefill, decode := fakes(t, "p", 3), fakes(t, "d", 2)
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	prompt := strings.Repeat("agentic rollout context. ", 20)
	var first string
	for turn := range 5 {
		post(t, r.url, "/v1/completions", completion(prompt, false))
		got := ""
		for _, p := range prefill {
			if p.Inference.Load() > 0 {
				got += p.Name
			}
		}
		if turn == 0 {
			first = got
		} else if got != first {
			t.Fatalf("turn %d: prefill workers used so far %s, want only %s", turn, got, first)
		}
		prompt += fmt.Sprintf(" tool output %d. ", turn)
	}
}

// TestPDAffinitySurvivesAnUnrelatedHotPrefillWorker is the seed scenario in
// small: prefill load counts queued requests, so one prefill worker is hot;
// the per-request check keeps the conversation on its own prefill worker, the
// fleet-wide gate sends it elsewhere.
func TestPDAffinitySurvivesAnUnrelatedHotPrefillWorker(t *testing.T) {
	for _, tc := range []struct {
		policy string
		keeps  bool
	}{{affinity.PolicyCacheAware, true}, {affinity.PolicyFleetGate, false}} {
		t.Run(tc.policy, func(t *testing.T) {
			prefill, decode := fakes(t, "p", 3), fakes(t, "d", 1)
			r := startPDRouter(t, PDVLLM, tc.policy, prefill, decode)
			prompt := strings.Repeat("cached conversation. ", 20)
			post(t, r.url, "/v1/completions", completion(prompt, false))
			owner := -1
			for i, p := range prefill {
				if p.Inference.Load() == 1 {
					owner = i
				}
			}
			hot := (owner + 1) % 3
			r.loads.SetRemote(affinity.WorkerID(owner+1), 4)
			r.loads.SetRemote(affinity.WorkerID(hot+1), 300)
			post(t, r.url, "/v1/completions", completion(prompt+" next turn", false))
			if kept := prefill[owner].Inference.Load() == 2; kept != tc.keeps {
				t.Fatalf("second turn stayed on its prefill worker: %v, want %v", kept, tc.keeps)
			}
		})
	}
}

// TestPDDecodeGuardIsHeldFromDispatch: two requests whose prefill is slow
// must not both pick decode worker 1, as they did when the decode load rose
// only once decode answered.
func TestPDDecodeGuardIsHeldFromDispatch(t *testing.T) {
	prefill, decode := fakes(t, "p", 2), fakes(t, "d", 2)
	for _, p := range prefill {
		p.Set(fakeworker.Hold())
	}
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, r.url, "/v1/completions", completion(fmt.Sprint("cold prompt ", i), false))
		}()
	}
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[0].Inference.Load()+prefill[1].Inference.Load() == 2 }, "both prefills to start")
	if r.load(3) != 1 || r.load(4) != 1 {
		t.Fatalf("decode loads %d and %d during the prefill, want 1 and 1", r.load(3), r.load(4))
	}
	for _, p := range prefill {
		p.Open()
	}
	wg.Wait()
	if decode[0].Inference.Load() != 1 || decode[1].Inference.Load() != 1 || r.totalLoad() != 0 {
		t.Fatalf("decode requests %d/%d, load %d", decode[0].Inference.Load(), decode[1].Inference.Load(), r.totalLoad())
	}
}

func TestPDClientLeavingDuringPrefillNeverCallsDecode(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	prefill[0].Set(fakeworker.Hold())
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	conn, _ := rawPost(t, r.url, "/v1/completions", completion("x", false))
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[0].Inference.Load() == 1 }, "the prefill to start")
	if r.load(1) != 1 || r.load(2) != 1 {
		t.Fatalf("loads prefill %d decode %d, want 1 and 1", r.load(1), r.load(2))
	}
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[0].HungUp.Load() == 1 }, "the prefill worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "both roles back to zero")
	if decode[0].Inference.Load() != 0 {
		t.Fatal("decode was called for a client that had left")
	}
}

func TestPDClientLeavingDuringDecodeStreamReleasesBothRoles(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	decode[0].Set(fakeworker.StreamHeld(3))
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if r.load(1) != 0 || r.load(2) != 1 {
		t.Fatalf("mid-stream loads prefill %d decode %d, want 0 and 1", r.load(1), r.load(2))
	}
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return decode[0].HungUp.Load() == 1 }, "the decode worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "both roles back to zero")
}

func TestPDRetriesEachPhaseOnAnotherWorker(t *testing.T) {
	prefill, decode := fakes(t, "p", 2), fakes(t, "d", 2)
	prefill[0].Set(fakeworker.Status(503, induced))
	decode[0].Set(fakeworker.Status(503, induced))
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	for i := range 3 {
		resp, out := post(t, r.url, "/v1/completions", completion(fmt.Sprint("prompt ", i), false))
		if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "d2" {
			t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get("x-worker-id"), out)
		}
	}
	if prefill[1].Inference.Load() != 3 || r.totalLoad() != 0 {
		t.Fatalf("good prefill saw %d requests, load %d", prefill[1].Inference.Load(), r.totalLoad())
	}
}

func TestPDBootstrapProtocolSendsBothHalvesAtOnce(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	r := startPDRouter(t, PDSGLang, affinity.PolicyCacheAware, prefill, decode)
	resp, out := post(t, r.url, "/v1/completions", completion("hello", false))
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "d1" {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[0].Inference.Load() == 1 }, "the prefill half")
	p, d := lastJSON(t, prefill[0]), lastJSON(t, decode[0])
	if p["bootstrap_room"] == nil || p["bootstrap_room"] != d["bootstrap_room"] || d["bootstrap_host"] != "127.0.0.1" {
		t.Fatalf("prefill %v decode %v", p, d)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "loads back to zero")
}

// TestPDBootstrapPrefillFailureAbortsTheDecode: in the concurrent protocol a
// decode cannot finish without its prefill; the client gets a 502 at once.
func TestPDBootstrapPrefillFailureAbortsTheDecode(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	decode[0].Set(fakeworker.Hold()) // the decode waits for KV that never comes
	prefill[0].Set(func(e *fakeworker.Exchange) {
		// Fail once the decode is under way: before, there is nothing to abort.
		// This is the worker's goroutine, where the test cannot fail: a decode
		// that never starts is caught by the checks after the answer.
		testwait.Holds(waitDeadline, func() bool { return decode[0].Inference.Load() != 0 })
		e.JSON(500, induced)
	})
	r := startPDRouter(t, PDSGLang, affinity.PolicyCacheAware, prefill, decode)
	resp, out := post(t, r.url, "/v1/completions", completion("hello", false))
	if resp.StatusCode != 502 || !strings.Contains(out, "prefill failed") {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return decode[0].HungUp.Load() == 1 }, "the decode worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "loads back to zero")
}

// TestPDPrefillClientErrorGoesStraightBack: a prefill 4xx is the client's
// mistake: it is not retried on other prefill workers, and no decode runs.
func TestPDPrefillClientErrorGoesStraightBack(t *testing.T) {
	prefill, decode := fakes(t, "p", 2), fakes(t, "d", 1)
	for _, p := range prefill {
		p.Set(fakeworker.Status(400, `{"error":{"message":"max_tokens is too large"}}`))
	}
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	resp, out := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 400 || out != `{"error":{"message":"max_tokens is too large"}}` {
		t.Fatalf("status %d %s, want the prefill worker's 400", resp.StatusCode, out)
	}
	if n := prefill[0].Inference.Load() + prefill[1].Inference.Load(); n != 1 || decode[0].Inference.Load() != 0 {
		t.Fatalf("%d prefill attempts and %d decodes, want 1 and 0", n, decode[0].Inference.Load())
	}
	if metric(t, r, "vllm_router_retries_total") != 0 || r.totalLoad() != 0 {
		t.Fatalf("retries %v load %d", metric(t, r, "vllm_router_retries_total"), r.totalLoad())
	}
}

func TestPDAClientThatLeavesIsNoPDError(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	prefill[0].Set(fakeworker.Hold())
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	conn, _ := rawPost(t, r.url, "/v1/completions", completion("x", false))
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[0].Inference.Load() == 1 }, "the prefill to start")
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "both roles back to zero")
	testwait.Eventually(t, waitDeadline, func() bool {
		return metric(t, r, `vllm_router_requests_total{route="/v1/completions"}`) == 1
	}, "the request to be counted")
	for _, phase := range []string{"prefill", "decode"} {
		if n := metric(t, r, fmt.Sprintf(`vllm_router_pd_errors_total{phase=%q}`, phase)); n != 0 {
			t.Fatalf("%s errors %v for a client that left", phase, n)
		}
	}
}

// TestPDCacheOutcomeIsCountedOncePerRequestAndRole: a retried prefill and a
// least_load decode add nothing to the cache counters.
func TestPDCacheOutcomeIsCountedOncePerRequestAndRole(t *testing.T) {
	prefill, decode := fakes(t, "p", 2), fakes(t, "d", 2)
	prefill[0].Set(fakeworker.Sequence(fakeworker.Status(503, induced), fakeworker.Default()))
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	prompt := strings.Repeat("a long agentic context. ", 20)
	for i := range 4 {
		if resp, out := post(t, r.url, "/v1/completions", completion(prompt+fmt.Sprint(i), false)); resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, out)
		}
	}
	hits, misses := metric(t, r, "vllm_router_cache_hits_total"), metric(t, r, "vllm_router_cache_misses_total")
	if hits != 3 || misses != 1 {
		t.Fatalf("hits %v misses %v, want 3 and 1", hits, misses)
	}
}

// refusingHealth keeps every worker eligible but refuses attempts on one,
// as an open circuit does.
type refusingHealth struct{ refused affinity.WorkerID }

func (refusingHealth) Eligible(affinity.WorkerID) bool { return true }
func (h refusingHealth) Begin(w affinity.WorkerID) (Attempt, error) {
	if w == h.refused {
		return nil, errors.New("circuit open")
	}
	return noAttempt{}, nil
}

// TestPDBootstrapNamesThePrefillWorkerThatRuns: in the concurrent protocol,
// when the prefill worker chosen first is refused by its circuit and
// another one runs the prefill, the bootstrap fields name the one that
// runs, or the decode would wait for a bootstrap that never comes.
func TestPDBootstrapNamesThePrefillWorkerThatRuns(t *testing.T) {
	prefill, decode := fakes(t, "p", 2), fakes(t, "d", 1)
	ws := []Worker{{ID: 1, URL: prefill[0].URL, Role: RolePrefill, BootstrapPort: 1111},
		{ID: 2, URL: prefill[1].URL, Role: RolePrefill, BootstrapPort: 2222},
		{ID: 3, URL: decode[0].URL, Role: RoleDecode}}
	r := startRouterDeps(t, Config{}, PDSGLang, affinity.PolicyLeastLoad, ws, refusingHealth{refused: 1})
	resp, out := post(t, r.url, "/v1/completions", completion("hello", false))
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "d1" {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return prefill[1].Inference.Load() == 1 }, "the prefill half")
	if n := prefill[0].Inference.Load(); n != 0 {
		t.Fatalf("the refused prefill worker got %d requests", n)
	}
	p, d := lastJSON(t, prefill[1]), lastJSON(t, decode[0])
	if d["bootstrap_port"] != float64(2222) || p["bootstrap_port"] != float64(2222) || p["bootstrap_room"] != d["bootstrap_room"] {
		t.Fatalf("the prefill ran on p2 (bootstrap port 2222), the bodies say prefill %v decode %v", p, d)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "loads back to zero")
}
