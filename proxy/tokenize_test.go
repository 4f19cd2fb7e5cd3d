package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// tokenizingWorker answers /tokenize with tokens, after hold returns when
// set (a slow tokenizer), and every inference request with a small answer.
type tokenizingWorker struct {
	*httptest.Server
	mu     sync.Mutex
	asked  []string // the /tokenize bodies
	tokens string
	hold   chan struct{}
}

func startTokenizingWorker(t *testing.T, tokens string) *tokenizingWorker {
	t.Helper()
	w := &tokenizingWorker{tokens: tokens}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == pathTokenize {
			w.mu.Lock()
			w.asked = append(w.asked, string(body))
			hold := w.hold
			w.mu.Unlock()
			if hold != nil {
				<-hold
			}
			_, _ = io.WriteString(rw, `{"count":3,"max_model_len":4096,"tokens":`+w.tokens+`}`)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	t.Cleanup(w.Close)
	return w
}

func (w *tokenizingWorker) bodies() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.asked)
}

// tokensSeen is a Decider that records the tokens each decision carried.
type tokensSeen struct {
	mu   sync.Mutex
	seen [][]uint32
}

func (d *tokensSeen) Decide(r *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	d.mu.Lock()
	d.seen = append(d.seen, req.Tokens)
	d.mu.Unlock()
	dec, g, err := r.Route(req, pool)
	return core.Decided{Decision: dec}, g, err
}

func (d *tokensSeen) Answered(core.Decided, core.Usage) {}

func (d *tokensSeen) last() []uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[len(d.seen)-1]
}

func tokenizingRouter(t *testing.T, w *tokenizingWorker, timeout time.Duration) (*testRouter, *tokensSeen) {
	t.Helper()
	seen := &tokensSeen{}
	cfg := Config{Tokenize: TokenizeConfig{Enabled: true, Timeout: timeout}}
	p, err := buildProxyWith(cfg, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}},
		func(d *Deps) { d.Decider = seen })
	if err != nil {
		t.Fatal(err)
	}
	return &testRouter{proxy: p, url: serveProxy(t, p), set: p.deps.Metrics}, seen
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`

func TestAChatIsRoutedWithTheTokensTheEngineComputesForItsMessagesAndTheyAreCached(t *testing.T) {
	w := startTokenizingWorker(t, `[7,8,9]`)
	r, seen := tokenizingRouter(t, w, time.Second)
	for range 2 {
		if resp, body := post(t, r.url, "/v1/chat/completions", chatBody); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := seen.last(); !slices.Equal(got, []uint32{7, 8, 9}) {
			t.Fatalf("the decision carried tokens %v, want the engine's [7 8 9]", got)
		}
	}
	asked := w.bodies()
	if len(asked) != 1 {
		t.Fatalf("the engine was asked %d times; the second request's tokens were cached", len(asked))
	}
	if want := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`; asked[0] != want {
		t.Errorf("asked %s, want vLLM's shape %s", asked[0], want)
	}
	if m := scrape(t, r); !strings.Contains(m, `vllm_router_kv_tokenize_total{result="cached"} 1`) ||
		!strings.Contains(m, `vllm_router_kv_tokenize_total{result="ok"} 1`) {
		t.Errorf("tokenize counts:\n%s", grepLines(m, "kv_tokenize"))
	}
}

func TestATokenizerSlowerThanItsBoundLeavesTheRequestToTheTextIndex(t *testing.T) {
	w := startTokenizingWorker(t, `[1]`)
	w.hold = make(chan struct{})
	defer close(w.hold)
	r, seen := tokenizingRouter(t, w, 20*time.Millisecond)
	if resp, body := post(t, r.url, "/v1/chat/completions", chatBody); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := seen.last(); got != nil {
		t.Fatalf("a decision carried tokens %v from a tokenizer past its bound", got)
	}
	if m := scrape(t, r); !strings.Contains(m, `vllm_router_kv_tokenize_total{result="slow"} 1`) {
		t.Errorf("tokenize counts:\n%s", grepLines(m, "kv_tokenize"))
	}
}

func TestACompletionWhosePromptIsNotOneStringIsNotTokenized(t *testing.T) {
	w := startTokenizingWorker(t, `[1]`)
	r, seen := tokenizingRouter(t, w, time.Second)
	post(t, r.url, "/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":1}`)
	if got := seen.last(); got != nil || len(w.bodies()) != 0 {
		t.Fatalf("tokens %v, %d asks", got, len(w.bodies()))
	}
	post(t, r.url, "/v1/completions", `{"model":"m","prompt":"abc","max_tokens":1}`)
	if asked := w.bodies(); len(asked) != 1 || asked[0] != `{"model":"m","prompt":"abc"}` {
		t.Fatalf("asked %v", asked)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func scrape(t *testing.T, r *testRouter) string {
	t.Helper()
	var b strings.Builder
	r.set.WritePrometheus(&b)
	return b.String()
}
