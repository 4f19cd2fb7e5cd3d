package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/agentturns"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// anthropicBody is a Messages API request asking text of the model m.
func anthropicBody(text string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 16, "stream": stream,
		"messages": []map[string]any{{"role": "user", "content": text}}})
	return string(b)
}

// postMessages posts body to path with the header pairs given, and returns
// the status, the headers and the body.
func postMessages(t *testing.T, url, path, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	resp, b := post(t, url, path, body, headers...)
	return resp.StatusCode, resp.Header, b
}

// anthropicErrorOf reads an error body in Anthropic's shape; ok is false
// for any other shape.
func anthropicErrorOf(body string) (typ, msg string, ok bool) {
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error == nil || e.Error.Type == "" {
		return "", "", false
	}
	return e.Error.Type, e.Error.Message, true
}

func TestAMessagesRequestIsRoutedByItsPrefixAndPassedOnWhole(t *testing.T) {
	w1, w2 := startFake(t, "w1"), startFake(t, "w2")
	w1.Set(fakeworker.Status(200, fakeworker.Message("w1")))
	w2.Set(fakeworker.Status(200, fakeworker.Message("w2")))
	r := startRouter(t, Config{}, w1, w2)
	conversation := agentturns.Anthropic(agentturns.AnthropicTools, 4)
	status, h, body := postMessages(t, r.url, "/v1/messages", conversation, "anthropic-version", "2023-06-01",
		"anthropic-beta", "prompt-caching-2024-07-31")
	if status != http.StatusOK || !strings.Contains(body, `"type":"message"`) {
		t.Fatalf("%d %s", status, body)
	}
	owner := h.Get("x-worker-id")
	w := map[string]*fakeworker.Worker{"w1": w1, "w2": w2}[owner]
	if w.LastPath() != "/v1/messages" || w.LastBody() != conversation {
		t.Fatalf("the worker got %s %s", w.LastPath(), w.LastBody())
	}
	if got := w.LastHeader(); got.Get("anthropic-version") != "2023-06-01" || got.Get("anthropic-beta") != "prompt-caching-2024-07-31" {
		t.Fatalf("Anthropic's headers did not reach the worker: %v", got)
	}
	// The agent's next turns share the whole prefix: they go where it went.
	for turn := 5; turn < 8; turn++ {
		if _, h, _ := postMessages(t, r.url, "/v1/messages", agentturns.Anthropic(agentturns.AnthropicTools, turn)); h.Get("x-worker-id") != owner {
			t.Fatalf("turn %d went to %s, the prefix is on %s", turn, h.Get("x-worker-id"), owner)
		}
	}
	if text := metricsText(r); !strings.Contains(text, `vllm_router_requests_total{route="/v1/messages"} 4`) {
		t.Fatal("the requests are not counted under their route")
	}
}

// modelsKnown waits until every worker of p has said which model it serves,
// one worker each of models: until then a worker serves any.
func modelsKnown(t *testing.T, p *Proxy, models ...string) {
	t.Helper()
	testwait.Eventually(t, waitDeadline, func() bool {
		v := p.fleet.view()
		if v.hasAny[RoleRegular] {
			return false
		}
		for _, m := range models {
			if pool, err := v.pool(RoleRegular, m); err != nil || pool.Len() != 1 {
				return false
			}
		}
		return true
	}, "the workers' models known")
}

func TestTheRoutersOwnErrorsOnTheMessagesAPIAreInAnthropicsShape(t *testing.T) {
	w := startFake(t, "w1")
	w.SetModels("m")
	cfg := Config{APIKeys: []string{"k1"}, MaxPayloadSize: 4 << 10}
	p, url := serveProxyWith(t, cfg, nil, w)
	modelsKnown(t, p, "m")
	key := []string{"Authorization", "Bearer k1"}
	for _, c := range []struct {
		name, path, body string
		headers          []string
		status           int
		typ              string
	}{
		{"no key", "/v1/messages", anthropicBody("hi", false), nil, 401, "authentication_error"},
		{"malformed JSON", "/v1/messages", `{"model":`, key, 400, "invalid_request_error"},
		{"an orphan tool_result", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"42"}]}]}`, key, 400, "invalid_request_error"},
		{"a model no worker serves", "/v1/messages", strings.Replace(anthropicBody("hi", false), `"m"`, `"other"`, 1), key, 404, "not_found_error"},
		{"too large", "/v1/messages", anthropicBody(strings.Repeat("x", 8<<10), false), key, 413, "request_too_large"},
		{"a path under the API that no route serves", "/v1/messages/batches", `{}`, key, 404, "not_found_error"},
		{"count_tokens' malformed JSON", "/v1/messages/count_tokens", `[`, key, 400, "invalid_request_error"},
	} {
		status, _, body := postMessages(t, url, c.path, c.body, c.headers...)
		typ, msg, ok := anthropicErrorOf(body)
		if status != c.status || !ok || typ != c.typ || msg == "" {
			t.Errorf("%s: %d %s; want %d and an Anthropic %s", c.name, status, body, c.status, c.typ)
		}
	}
	// The OpenAI routes keep theirs.
	if status, _, body := postMessages(t, url, "/v1/chat/completions", `{"model":`, key...); status != 400 ||
		!strings.Contains(body, `"error":{`) || strings.Contains(body, `"type":"error"`) {
		t.Errorf("chat's malformed JSON: %d %s", status, body)
	}
	if n := w.Inference.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the worker", n)
	}
}

// The door admits the Messages API as every generation, by class and
// tenant: with its one slot taken, a full queue is a 429, a request that
// waited too long a 408, both in Anthropic's shape.
func TestTheDoorRefusesAMessagesRequestInAnthropicsShape(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	cfg := classesConfig()
	cfg.Admission.Capacity, cfg.Admission.RefillPerSec = 1, 1e6
	cfg.Admission.QueueSize = 1
	cfg.Admission.QueueTimeout = 300 * time.Millisecond
	r := startRouter(t, cfg, w)
	first := make(chan int, 1)
	go func() { s, _, _ := postMessages(t, r.url, "/v1/messages", anthropicBody("one", false)); first <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return int(w.Inference.Load()) == 1 }, "the first request at the worker")
	queued := make(chan [2]string, 1)
	go func() {
		s, _, b := postMessages(t, r.url, "/v1/messages", anthropicBody("two", false), "x-priority", "bulk")
		queued <- [2]string{http.StatusText(s), b}
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "a request queued")
	status, _, body := postMessages(t, r.url, "/v1/messages", anthropicBody("three", false), "x-priority", "bulk")
	if typ, msg, ok := anthropicErrorOf(body); status != http.StatusTooManyRequests || !ok || typ != "rate_limit_error" ||
		!strings.Contains(msg, "class bulk") {
		t.Fatalf("the queue full: %d %s", status, body)
	}
	q := <-queued
	if typ, msg, ok := anthropicErrorOf(q[1]); q[0] != http.StatusText(http.StatusRequestTimeout) || !ok || typ != "timeout_error" ||
		!strings.Contains(msg, "timed out") {
		t.Fatalf("the queued request: %s %s", q[0], q[1])
	}
	w.Open()
	if s := <-first; s != http.StatusOK {
		t.Fatalf("the admitted request: %d", s)
	}
}

// A stream cut after its first byte ends with an Anthropic error event
// (the SDKs skip events without a name) and without its terminating chunk:
// never a clean message_stop.
func TestAMessagesStreamCutMidwayEndsWithAnAnthropicErrorEvent(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.MessageStreamThenCut(3))
	r := startRouter(t, Config{}, w)
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/messages", strings.NewReader(anthropicBody("tell me", true)))
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, readErr := io.ReadAll(resp.Body)
	events := string(b)
	if readErr == nil {
		t.Fatalf("the cut stream ended cleanly:\n%s", events)
	}
	last := events[strings.LastIndex(strings.TrimSuffix(events, "\n\n"), "\n\n")+2:]
	name, data, _ := strings.Cut(strings.TrimSpace(last), "\n")
	if typ, _, ok := anthropicErrorOf(strings.TrimPrefix(data, "data: ")); name != "event: error" || !ok || typ != "api_error" {
		t.Fatalf("the stream's last event is %q:\n%s", last, events)
	}
	if strings.Contains(events, "message_stop") || !strings.Contains(events, "t2") {
		t.Fatalf("the stream:\n%s", events)
	}
}

// usageHeard is a Decider that keeps the usage of every answer it is told.
type usageHeard struct {
	mu    sync.Mutex
	heard []core.Usage
}

func (d *usageHeard) Decide(r *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	dec, g, err := r.Route(req, pool)
	return core.Decided{Decision: dec}, g, err
}

func (d *usageHeard) Answered(_ core.Decided, u core.Usage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heard = append(d.heard, u)
}

func (d *usageHeard) all() []core.Usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]core.Usage(nil), d.heard...)
}

// The engine's cache_read_input_tokens judge a decision as cached_tokens
// do, whether the answer is whole or streamed (where the prompt's usage is
// in the first event, message_start).
func TestAnthropicUsageJudgesTheDecision(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		if e.Wants(`"stream":true`) {
			fakeworker.MessageStream(100)(e) // message_start falls out of the stream's tail
			return
		}
		fakeworker.Status(200, fakeworker.Message("w1"))(e)
	})
	heard := &usageHeard{}
	p, err := buildProxyWith(Config{}, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}},
		func(d *Deps) { d.Decider = heard })
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)
	for _, stream := range []bool{false, true} {
		if status, _, body := postMessages(t, url, "/v1/messages", anthropicBody("hello", stream)); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	want := core.Usage{PromptTokens: 300, CachedTokens: 200, HasCached: true}
	testwait.Eventually(t, waitDeadline, func() bool { return len(heard.all()) == 2 }, "both answers judged")
	for i, u := range heard.all() {
		if u != want {
			t.Errorf("answer %d judged with %+v, want %+v", i, u, want)
		}
	}
}

// count_tokens generates nothing: it takes no admission slot, so a count
// goes through while the door's one slot is held by a generation, and it
// goes to a worker that serves its model, the busier one here.
func TestCountTokensGoesToAWorkerOfItsModelWithoutAnAdmissionSlot(t *testing.T) {
	idle, counter := startFake(t, "idle"), startFake(t, "counter")
	idle.SetModels("other")
	counter.SetModels("m")
	counter.Set(fakeworker.Sequence(fakeworker.Hold(), fakeworker.Status(200, `{"input_tokens":12}`)))
	p, url := serveProxyWith(t, Config{Admission: admission.Config{Capacity: 1, RefillPerSec: 1e6, QueueSize: 0}}, nil, idle, counter)
	modelsKnown(t, p, "m", "other")
	held := make(chan int, 1)
	go func() { s, _, _ := postMessages(t, url, "/v1/messages", anthropicBody("long", false)); held <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return counter.Inference.Load() == 1 }, "the generation at its worker")
	if status, _, _ := postMessages(t, url, "/v1/messages", anthropicBody("another", false)); status != http.StatusTooManyRequests {
		t.Fatalf("a second generation with the one slot held: %d, want 429", status)
	}
	for range 3 {
		status, h, body := postMessages(t, url, "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 || body != `{"input_tokens":12}` || h.Get("x-worker-id") != "counter" {
			t.Fatalf("count_tokens with the slot held: %d %s from %q", status, body, h.Get("x-worker-id"))
		}
	}
	if counter.LastPath() != "/v1/messages/count_tokens" || idle.Inference.Load() != 0 {
		t.Fatalf("the count reached %s; the idle worker of another model got %d", counter.LastPath(), idle.Inference.Load())
	}
	counter.Open()
	if s := <-held; s != 200 {
		t.Fatalf("the held generation: %d", s)
	}
}

// The client's key is the router's: with --api-keys it reaches no worker,
// whether sent as a bearer token or as Anthropic's x-api-key.
func TestTheClientsKeyDoesNotReachTheWorker(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Status(200, fakeworker.Message("w1")))
	_, url := serveProxyWith(t, Config{APIKeys: []string{"k1"}, APIKey: "worker-key"}, nil, w)
	status, _, body := postMessages(t, url, "/v1/messages", anthropicBody("hi", false), "Authorization", "Bearer k1", "x-api-key", "k1")
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if h := w.LastHeader(); h.Get("x-api-key") != "" || h.Get("Authorization") != "Bearer worker-key" {
		t.Fatalf("the worker got x-api-key %q, Authorization %q", h.Get("x-api-key"), h.Get("Authorization"))
	}
}

// A stream the router cuts on the Messages API ends with an event named
// error, in Anthropic's shape; elsewhere with OpenAI's data event.
func TestTheErrorEventOfACutStreamIsInTheRoutesShape(t *testing.T) {
	event := failure.SSEEvent([]byte("/v1/messages"), failure.Errorf(failure.ErrUpstream, "the worker died"))
	sc := bufio.NewScanner(strings.NewReader(string(event)))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if typ, _, ok := anthropicErrorOf(strings.TrimPrefix(lines[1], "data: ")); len(lines) != 3 || lines[0] != "event: error" || !ok || typ != "api_error" {
		t.Fatalf("the error event: %q", event)
	}
	if event := failure.SSEEvent([]byte("/v1/chat/completions"), failure.Errorf(failure.ErrUpstream, "x")); !strings.HasPrefix(string(event), `data: {"error":{`) {
		t.Fatalf("chat's error event: %q", event)
	}
}

// A Messages API request disaggregates as a chat does (vLLM's Messages API
// takes and answers kv_transfer_params): the prefill gets one token and no
// stream, the decode the client's request with the prefill's parameters.
func TestAMessagesRequestIsDisaggregatedAsAChat(t *testing.T) {
	prefill, decode := fakes(t, "p", 1), fakes(t, "d", 1)
	r := startPDRouter(t, PDVLLM, affinity.PolicyCacheAware, prefill, decode)
	status, h, out := postMessages(t, r.url, "/v1/messages", anthropicBody("hello", true))
	if status != 200 || h.Get("x-worker-id") != "d1" {
		t.Fatalf("status %d from %s: %s", status, h.Get("x-worker-id"), out)
	}
	p, d := lastJSON(t, prefill[0]), lastJSON(t, decode[0])
	pkv, _ := p["kv_transfer_params"].(map[string]any)
	dkv, _ := d["kv_transfer_params"].(map[string]any)
	if prefill[0].LastPath() != "/v1/messages" || p["max_tokens"] != 1.0 || p["stream"] != false || pkv["do_remote_decode"] != true {
		t.Fatalf("prefill request %s %v", prefill[0].LastPath(), p)
	}
	if decode[0].LastPath() != "/v1/messages" || d["max_tokens"] != 16.0 || d["stream"] != true || dkv["remote_engine_id"] != "p1" {
		t.Fatalf("decode request %s %v", decode[0].LastPath(), d)
	}
}
