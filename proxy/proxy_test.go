package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

func TestMain(m *testing.M) {
	if w := os.Getenv(edgeChildEnv); w != "" {
		runEdgeChild(w)
	}
	leaktest.Main(m)
}

func completion(prompt string, stream bool) string {
	return fmt.Sprintf(`{"model":"m","prompt":%q,"stream":%v,"max_tokens":4}`, prompt, stream)
}

func TestProxiesACompletionWithHeadersAndRequestID(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	resp, body := post(t, r.url, "/v1/completions", completion("hello", false))
	if resp.StatusCode != 200 || !strings.Contains(body, `"worker":"w1"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if resp.Header.Get("x-worker-id") != "w1" || resp.Header.Get("x-request-id") == "" {
		t.Fatalf("headers: %v", resp.Header)
	}
	if resp.Header.Get("Keep-Alive") != "" {
		t.Fatal("hop-by-hop header Keep-Alive crossed the proxy")
	}
	if w.LastBody() != completion("hello", false) {
		t.Fatalf("worker got %v", w.LastBody())
	}
	if r.totalLoad() != 0 {
		t.Fatalf("load %d after the response", r.totalLoad())
	}
}

func TestClientRequestIDIsKept(t *testing.T) {
	r := startRouter(t, Config{}, startFake(t, "w1"))
	req, _ := http.NewRequest("POST", r.url+"/v1/completions", strings.NewReader(completion("x", false)))
	req.Header.Set("x-correlation-id", "abc-123")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("x-request-id"); got != "abc-123" {
		t.Fatalf("x-request-id = %q", got)
	}
}

func TestSamePromptSticksToOneWorker(t *testing.T) {
	ws := []*fakeworker.Worker{startFake(t, "w1"), startFake(t, "w2"), startFake(t, "w3")}
	r := startRouter(t, Config{}, ws...)
	prompt := strings.Repeat("a long shared conversation prefix. ", 20)
	first, _ := post(t, r.url, "/v1/completions", completion(prompt, false))
	for turn := range 5 {
		prompt += fmt.Sprintf(" turn %d answer and observation.", turn)
		resp, _ := post(t, r.url, "/v1/completions", completion(prompt, false))
		if resp.Header.Get("x-worker-id") != first.Header.Get("x-worker-id") {
			t.Fatalf("turn %d went to %s, first to %s", turn, resp.Header.Get("x-worker-id"), first.Header.Get("x-worker-id"))
		}
	}
}

func TestBodyAtTheLimitIsRoutedAndOneByteMoreIsRefused(t *testing.T) {
	w := startFake(t, "w1")
	body := completion("x", false)
	r := startRouter(t, Config{MaxPayloadSize: len(body)}, w)
	if resp, b := post(t, r.url, "/v1/completions", body); resp.StatusCode != 200 {
		t.Fatalf("body at the limit: %d %s", resp.StatusCode, b)
	}
	over := completion("xy", false)
	resp, b := post(t, r.url, "/v1/completions", over)
	if resp.StatusCode != 413 || !strings.Contains(b, `"error"`) {
		t.Fatalf("one byte over: %d %s", resp.StatusCode, b)
	}
	if n := w.Inference.Load(); n != 1 {
		t.Fatalf("worker saw %d requests, want only the one at the limit", n)
	}
}

func TestBadRequestsNeverReachAWorker(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/v1/completions", `{"model":`, 400},
		{"/v1/completions", `{"prompt":"x"}`, 400},
		{"/v1/chat/completions", `{"model":"m","messages":3}`, 400},
	} {
		resp, b := post(t, r.url, tc.path, tc.body)
		if resp.StatusCode != tc.status || !strings.Contains(b, `"message"`) {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, resp.StatusCode, b)
		}
	}
	if w.Inference.Load() != 0 {
		t.Fatal("a bad request reached the worker")
	}
}

func TestUnknownModelIs404AndNoEligibleWorkerIs503(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: w.URL, Role: RoleRegular, Model: "m"}})
	resp, b := post(t, r.url, "/v1/completions", `{"model":"other","prompt":"x"}`)
	if resp.StatusCode != 404 || !strings.Contains(b, "other") {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, b)
	}
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: w.URL, Role: RoleRegular, Model: "m", Draining: true}})
	if resp, b := post(t, r.url, "/v1/completions", completion("x", false)); resp.StatusCode != 503 {
		t.Fatalf("no eligible worker: %d %s", resp.StatusCode, b)
	}
}

func TestRetriesOnAnotherWorkerAfterA503(t *testing.T) {
	bad, good := startFake(t, "bad"), startFake(t, "good")
	bad.Set(fakeworker.Status(503, induced))
	r := startRouter(t, Config{}, bad, good)
	for i := range 4 {
		resp, body := post(t, r.url, "/v1/completions", completion(fmt.Sprint("p", i), false))
		if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "good" {
			t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get("x-worker-id"), body)
		}
	}
	if r.totalLoad() != 0 {
		t.Fatalf("load %d after retries", r.totalLoad())
	}
}

func TestRetriesAfterAConnectError(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	good := startFake(t, "good")
	r := startRouter(t, Config{}, good)
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: deadURL, Role: RoleRegular}, {ID: 2, URL: good.URL, Role: RoleRegular}})
	resp, _ := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "good" || r.totalLoad() != 0 {
		t.Fatalf("status %d from %q, load %d", resp.StatusCode, resp.Header.Get("x-worker-id"), r.totalLoad())
	}
}

// TestStreamIsRelayedEventByEvent reads the first SSE event while the worker
// still holds the rest back.
func TestStreamIsRelayedEventByEvent(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamHeld(3))
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	defer conn.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	events := bufio.NewReader(resp.Body)
	line, err := events.ReadString('\n')
	if err != nil || line != "data: {\"n\":0}\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	if r.totalLoad() != 1 || r.totalBacklog() != 0 {
		t.Fatalf("load %d, prefill backlog %d while streaming, want 1 and 0 (the first token came)", r.totalLoad(), r.totalBacklog())
	}
	w.Open()
	rest := readAll(t, events)
	if !strings.HasSuffix(rest, "data: [DONE]\n\n") {
		t.Fatalf("rest of stream %q", rest)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
}

// TestClientDisconnectMidStreamReleasesLoadAndClosesUpstream: the engine must
// hear of it (its connection closes) and the load must go back to zero.
func TestClientDisconnectMidStreamReleasesLoadAndClosesUpstream(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamHeld(3))
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
}

// TestClientDisconnectBeforeTheAnswerReleasesLoadAndClosesUpstream: a
// non-streaming request whose client leaves while the worker still computes.
func TestClientDisconnectBeforeTheAnswerReleasesLoadAndClosesUpstream(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	r := startRouter(t, Config{}, w)
	conn, _ := rawPost(t, r.url, "/v1/completions", completion("x", false))
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the request to reach the worker")
	if r.totalLoad() != 1 || r.totalBacklog() != int64(len("x")) {
		t.Fatalf("load %d, prefill backlog %d while waiting, want 1 and the prompt's 1 byte", r.totalLoad(), r.totalBacklog())
	}
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
	if w.Inference.Load() != 1 {
		t.Fatalf("a client that left was retried: %d requests", w.Inference.Load())
	}
}

func TestMetricsCountRequestsAndCacheOutcomes(t *testing.T) {
	r := startRouter(t, Config{}, startFake(t, "w1"))
	prompt := strings.Repeat("shared prefix ", 10)
	post(t, r.url, "/v1/completions", completion(prompt, false))
	post(t, r.url, "/v1/completions", completion(prompt, false))
	_, body := get(t, r.url+"/metrics")
	for _, want := range []string{`vllm_router_requests_total{route="/v1/completions"} 2`,
		"vllm_router_cache_hits_total 1", "vllm_router_cache_misses_total 1", "vllm_router_worker_load{"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestReadinessNeedsAnEligibleWorker(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{})
	if resp, _ := get(t, r.url+"/readiness"); resp.StatusCode != 503 {
		t.Fatalf("ready with no worker: %d", resp.StatusCode)
	}
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: w.URL, Role: RoleRegular}})
	if resp, _ := get(t, r.url+"/readiness"); resp.StatusCode != 200 {
		t.Fatalf("not ready with a worker: %d", resp.StatusCode)
	}
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, readAll(t, bufio.NewReader(resp.Body))
}

func readAll(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	_, err := r.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// rawPost sends a request on a connection of its own, so the test can hang
// up whenever it likes.
func rawPost(t *testing.T, base, path, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	return conn, bufio.NewReader(conn)
}

// TestModelsComeFromTheWorkers: a worker registered without a model is asked
// for its /v1/models; the union is served, and other models are a 404.
func TestModelsComeFromTheWorkers(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	a.SetModels("llama")
	b.SetModels("qwen")
	r := startRouter(t, Config{}, a, b)
	testwait.Eventually(t, waitDeadline, func() bool {
		_, body := get(t, r.url+"/v1/models")
		return strings.Contains(body, `"llama"`) && strings.Contains(body, `"qwen"`)
	}, "both workers' models")
	resp, _ := post(t, r.url, "/v1/completions", `{"model":"qwen","prompt":"x"}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "b" {
		t.Fatalf("qwen went to %q with %d", resp.Header.Get("x-worker-id"), resp.StatusCode)
	}
	if resp, _ := post(t, r.url, "/v1/completions", `{"model":"mistral","prompt":"x"}`); resp.StatusCode != 404 {
		t.Fatalf("a model nobody serves: %d", resp.StatusCode)
	}
}

func TestKVCapacityIsReadFromVLLMMetrics(t *testing.T) {
	metrics := []byte("# HELP x\nvllm:num_requests_running 0\n" +
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048"} 1` + "\n")
	if n, err := parseKVCapacity(metrics); err != nil || n != 32768 {
		t.Fatalf("capacity %d, %v; want 32768 tokens", n, err)
	}
	if _, err := parseKVCapacity([]byte("vllm:num_requests_running 0\n")); err == nil {
		t.Fatal("capacity read from metrics that have none")
	}
}

// TestIndexForgetsWhenTheEngineWould: a worker whose KV cache holds 64
// tokens (256 bytes of text, 16 blocks of 16 bytes) owns no more than that
// in the index, however much was routed to it.
func TestIndexForgetsWhenTheEngineWould(t *testing.T) {
	w := startFake(t, "small")
	w.SetMetrics(fakeworker.Text(`vllm:cache_config_info{block_size="16",num_gpu_blocks="4"} 1` + "\n"))
	r := startRouter(t, Config{BlockSize: 16}, w)
	testwait.Eventually(t, waitDeadline, func() bool {
		post(t, r.url, "/v1/completions", completion(strings.Repeat("x", 1000), false))
		return r.index.Blocks(1) == 16
	}, "the capacity to be read")
}

// TestConsistentHashFollowsTheSessionHeader: with consistent_hash, requests
// that carry the same X-Session-ID go to one worker whatever their prompt.
func TestConsistentHashFollowsTheSessionHeader(t *testing.T) {
	ws := []Worker{}
	for i, f := range []*fakeworker.Worker{startFake(t, "a"), startFake(t, "b"), startFake(t, "c"), startFake(t, "d")} {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: f.URL, Role: RoleRegular})
	}
	r := startRouterWith(t, Config{}, "", affinity.PolicyConsistentHash, ws)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	used := map[string]bool{}
	for session := range 6 {
		first := ""
		for turn := range 4 {
			req, _ := http.NewRequest("POST", r.url+"/v1/completions", strings.NewReader(completion(fmt.Sprint("turn ", turn), false)))
			req.Header.Set("X-Session-ID", fmt.Sprint("session-", session))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if w := resp.Header.Get("x-worker-id"); first == "" {
				first = w
			} else if w != first {
				t.Fatalf("session %d turn %d went to %s, first turn to %s", session, turn, w, first)
			}
		}
		used[first] = true
	}
	if len(used) < 2 {
		t.Fatalf("6 sessions all went to %v: the session key is not used", used)
	}
}
