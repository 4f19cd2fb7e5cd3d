package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/agentturns"
	"github.com/kvrouter/kvrouter/internal/dialtest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/proxy/wire"
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
			tokens := w.tokens
			if tokens == "" { // tokens of its own for every prompt: its length in bytes
				tokens = fmt.Sprintf("[%d]", len(body))
			}
			_, _ = io.WriteString(rw, `{"count":1,"max_model_len":4096,"tokens":`+tokens+`}`)
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
	text []int // each decision's TokenText
}

func (d *tokensSeen) Decide(r *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	d.mu.Lock()
	d.seen = append(d.seen, req.Tokens)
	d.text = append(d.text, req.TokenText)
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

func (d *tokensSeen) lastText() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.text[len(d.text)-1]
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
	release := sync.OnceFunc(func() { close(w.hold) })
	t.Cleanup(release)
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
	release() // the engine answers at last: the late tokens are learned for the next time
	testwait.Eventually(t, 10*time.Second, func() bool {
		post(t, r.url, "/v1/chat/completions", chatBody)
		return slices.Equal(seen.last(), []uint32{1})
	}, "%s", "the prompt's late tokens learned")
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

func chatTurns(contents ...string) string {
	var msgs []string
	for i, c := range contents {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, c))
	}
	return `{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"max_tokens":1}`
}

// tokenizeBodyOf is the /tokenize body the router sends for a client's.
func tokenizeBodyOf(t *testing.T, ep *wire.Endpoint, body string) string {
	t.Helper()
	p, ok := tokenizeRequest(ep, "m", []byte(body))
	if !ok {
		t.Fatalf("no tokenize request for %s", body)
	}
	return string(p.body)
}

// A conversation's next turn starts with the turn before: it is routed at
// once on that turn's tokens, standing for that turn's routing text, even
// while the engine's tokenizer is stuck, and its own tokens are learned in
// the background, so that the turn after finds them.
func TestAChatsNextTurnIsRoutedAtOnceOnTheTokensOfTheTurnBeforeAndItsOwnAreLearned(t *testing.T) {
	w := startTokenizingWorker(t, "")
	r, seen := tokenizingRouter(t, w, 20*time.Millisecond)
	first, next := chatTurns("read the file"), chatTurns("read the file", "here it is", "now summarise it")
	firstTokens := []uint32{uint32(len(tokenizeBodyOf(t, wire.ChatCompletions, first)))}
	if resp, body := post(t, r.url, "/v1/chat/completions", first); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	w.mu.Lock()
	w.hold = make(chan struct{}) // the tokenizer is stuck from now on
	release := sync.OnceFunc(func() { close(w.hold) })
	w.mu.Unlock()
	t.Cleanup(release) // before the worker closes: a failing test does not leave its handler stuck
	if resp, body := post(t, r.url, "/v1/chat/completions", next); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := seen.last(); !slices.Equal(got, firstTokens) {
		t.Fatalf("the next turn carried tokens %v, want the first turn's %v", got, firstTokens)
	}
	if got, want := seen.lastText(), len("user\nread the file\n"); got != want {
		t.Errorf("the first turn's tokens stand for %d bytes of routing text, want %d", got, want)
	}
	m := scrape(t, r)
	if !strings.Contains(m, `vllm_router_kv_tokenize_total{result="prefix"} 1`) || !strings.Contains(m, `vllm_router_kv_tokenize_total{result="slow"} 0`) {
		t.Errorf("tokenize counts:\n%s", grepLines(m, "kv_tokenize_total"))
	}
	release() // the background ask is answered
	nextTokens := []uint32{uint32(len(tokenizeBodyOf(t, wire.ChatCompletions, next)))}
	testwait.Eventually(t, 10*time.Second, func() bool {
		post(t, r.url, "/v1/chat/completions", next)
		return slices.Equal(seen.last(), nextTokens)
	}, "%s", "the next turn's own tokens learned")
	if got := seen.lastText(); got != 0 {
		t.Errorf("the turn's own tokens stand for %d bytes, want all of its text (0)", got)
	}
}

// A completion that continues an earlier prompt is routed on its tokens;
// one that shares its first chunks but not the whole of it is not.
func TestACompletionIsRoutedOnTheTokensOfAnEarlierPromptOnlyWhenItStartsWithAllOfIt(t *testing.T) {
	w := startTokenizingWorker(t, "")
	r, seen := tokenizingRouter(t, w, time.Second)
	earlier := strings.Repeat("a long shared context. ", 30) // 690 bytes: two whole chunks and a part
	complete := func(prompt string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, prompt)
		if resp, b := post(t, r.url, "/v1/completions", body); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	complete(earlier)
	earlierTokens := seen.last()
	complete(earlier + " and a question")
	if got := seen.last(); !slices.Equal(got, earlierTokens) || seen.lastText() != len(earlier) {
		t.Fatalf("the continuation carried %v for %d bytes, want the earlier prompt's %v for %d", got, seen.lastText(),
			earlierTokens, len(earlier))
	}
	asked := len(w.bodies())
	diverged := earlier[:600] + strings.Repeat("x", 200) // the same two chunks, another tail
	complete(diverged)
	if got := seen.last(); slices.Equal(got, earlierTokens) || seen.lastText() != 0 {
		t.Fatalf("a prompt that does not start with the earlier one carried its tokens %v", got)
	}
	if len(w.bodies()) <= asked {
		t.Error("the diverging prompt was not asked of the engine")
	}
}

// The cache holds at most its bound of prompts, the least recently used out.
func TestTheTokenCacheKeepsItsBound(t *testing.T) {
	c := newTokenCache(2, 1<<30)
	var ps []prompt
	for i := range 3 {
		p, _ := tokenizeRequest(wire.Completions, "m", []byte(fmt.Sprintf(`{"prompt":"prompt %d"}`, i)))
		ps = append(ps, p)
		c.put(p, []uint32{uint32(i)}, 8)
		if i == 1 {
			c.lookup(ps[0]) // 0 is used again: 1 is the least recently used
		}
	}
	if e, whole := c.lookup(ps[1]); e != nil && whole {
		t.Error("the least recently used prompt is still held past the bound")
	}
	for _, i := range []int{0, 2} {
		if e, whole := c.lookup(ps[i]); e == nil || !whole || e.tokens[0] != uint32(i) {
			t.Errorf("prompt %d: %+v, %v", i, e, whole)
		}
	}
	if c.order.Len() != 2 || len(c.byFull) != 2 || len(c.byMark) > 2 {
		t.Errorf("%d entries, %d names, %d marks: want 2, 2, at most 2", c.order.Len(), len(c.byFull), len(c.byMark))
	}
}

// The cache holds at most its budget of bytes, whatever the engines answer:
// the lying /tokenize of the security review (long lists, cached per
// prompt) cannot grow it past the budget; a list larger than the whole
// budget is not kept at all.
func TestTheTokenCacheKeepsItsBudgetInBytes(t *testing.T) {
	const budget = 1 << 20
	c := newTokenCache(4096, budget)
	long := make([]uint32, 100_000) // 400 kB
	for i := range 50 {
		p, _ := tokenizeRequest(wire.Completions, "m", []byte(fmt.Sprintf(`{"prompt":"prompt %d"}`, i)))
		c.put(p, long, 8)
		if c.size() > budget {
			t.Fatalf("after %d answers the cache holds %d bytes, over its budget %d", i+1, c.size(), budget)
		}
	}
	if c.order.Len() != 2 {
		t.Errorf("%d entries of 400 kB in a budget of 1 MiB, want 2", c.order.Len())
	}
	p, _ := tokenizeRequest(wire.Completions, "m", []byte(`{"prompt":"too long"}`))
	c.put(p, make([]uint32, 300_000), 8)
	if e, _ := c.lookup(p); e != nil {
		t.Error("a list larger than the budget was kept")
	}
}

// An engine whose /tokenize answers more tokens than the prompt could
// make is refused before its list is decoded past the bound, and the
// request routes on the text index.
func TestALyingTokenizeAnswerIsRefused(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"hello"}`)
	lie := []byte(`{"count":9000,"tokens":[` + strings.Repeat("1,", 8999) + `1]}`)
	if _, err := tokensOf(lie, len(body)+templateTokens); !errors.Is(err, ErrTooManyTokens) {
		t.Fatalf("err %v, want ErrTooManyTokens", err)
	}
	honest := []byte(`{"count":3,"tokens":[1,2,3]}`)
	if got, err := tokensOf(honest, len(body)+templateTokens); err != nil || len(got) != 3 {
		t.Fatalf("%v, %v", got, err)
	}
	if limit := answerLimit(len(body)); limit >= maxTokenizeAnswer || limit < (len(body)+templateTokens)*tokenJSONBytes {
		t.Errorf("the answer to %d bytes may be %d bytes long", len(body), limit)
	}
}

// Tokenization dials through the proxy's dialer, as inference does: an
// engine registered by a name that resolves to a metadata address is never
// connected to, and the one whose name resolves to loopback is asked.
func TestTokenizationConnectsOnlyWhereTheWorkerHostPolicyAllows(t *testing.T) {
	w := startTokenizingWorker(t, "")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.URL, "http://"))
	var log dialtest.Log
	dialer := &workerurl.Dialer{Connect: log.Connect, Resolver: dialtest.Resolver{
		"metadata.internal": "169.254.169.254", "good.internal": "127.0.0.1"}}
	ws := []Worker{{ID: 1, URL: "http://metadata.internal:" + port, Role: RoleRegular},
		{ID: 2, URL: "http://good.internal:" + port, Role: RoleRegular}}
	cfg := Config{Tokenize: TokenizeConfig{Enabled: true, Timeout: time.Second},
		Retry: Retry{MaxAttempts: 3, InitialBackoff: time.Millisecond}}
	p, err := buildProxyWith(cfg, affinity.PolicyCacheAware, ws, func(d *Deps) { d.Dialer = dialer })
	if err != nil {
		t.Fatal(err)
	}
	r := &testRouter{proxy: p, url: serveProxy(t, p), set: p.deps.Metrics}
	for i := range 6 {
		post(t, r.url, "/v1/chat/completions", chatTurns(fmt.Sprintf("question %d", i)))
	}
	if len(w.bodies()) == 0 {
		t.Fatal("no engine was asked to tokenize")
	}
	for _, a := range log.Attempts() {
		if a != "127.0.0.1:"+port {
			t.Fatalf("a connection was attempted to %s", a)
		}
	}
}

// The engine renders a chat's tools into its prompt: the router asks for
// its tokens with them, and a chat with other tools is not taken for the
// continuation of one it saw.
func TestAChatIsTokenizedWithItsTools(t *testing.T) {
	w := startTokenizingWorker(t, "")
	r, seen := tokenizingRouter(t, w, time.Second)
	withTools := func(tools, body string) string {
		return strings.Replace(body, `{"model":"m",`, `{"model":"m","tools":`+tools+`,`, 1)
	}
	first := withTools(agentturns.ChatTools, chatTurns("read the file"))
	if resp, body := post(t, r.url, "/v1/chat/completions", first); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if asked := w.bodies(); len(asked) != 1 || !strings.Contains(asked[0], `"tools":[{"type":"function"`) {
		t.Fatalf("asked %q", asked)
	}
	other := withTools(agentturns.OtherChatTools, chatTurns("read the file", "here it is", "now summarise it"))
	if resp, body := post(t, r.url, "/v1/chat/completions", other); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if m := scrape(t, r); strings.Contains(m, `vllm_router_kv_tokenize_total{result="prefix"} 1`) {
		t.Fatalf("a chat with other tools was routed on the tokens of the first: %v", seen.last())
	}
}

// FuzzTokensOf reads whatever an engine answers /tokenize with: an error,
// or at most the tokens the prompt could make, never a panic.
func FuzzTokensOf(f *testing.F) {
	f.Add([]byte(`{"count":3,"max_model_len":8192,"tokens":[1,2,3]}`), 64)
	f.Add([]byte(`{"tokens":[4294967295,0,-1]}`), 64)
	f.Add([]byte(`{"tokens":[1e9,"x",null]}`), 2)
	f.Fuzz(func(t *testing.T, answer []byte, most int) {
		if most < 0 {
			most = -most
		}
		tokens, err := tokensOf(answer, most)
		if err == nil && len(tokens) > most {
			t.Fatalf("%d tokens passed a bound of %d", len(tokens), most)
		}
	})
}

// lateKeeper is a tier's keeper of tokens that has none: it answers at
// once, or late past the deadline it was given (a peer on a loaded host is
// scheduled tens of milliseconds after its deadline), and records each
// deadline.
type lateKeeper struct {
	late      time.Duration // 0: at once
	mu        sync.Mutex
	deadlines []time.Duration // each deadline, from when it was asked
}

func (k *lateKeeper) KeeperOf(affinity.WorkerID) string { return "peer" }

func (k *lateKeeper) Find(_ string, _ []byte, deadline time.Time) ([]byte, error) {
	k.mu.Lock()
	k.deadlines = append(k.deadlines, time.Until(deadline))
	k.mu.Unlock()
	if k.late > 0 {
		time.Sleep(time.Until(deadline) + k.late) // the latency of the late peer the double stands for
	}
	return nil, errors.New("no answer in time")
}

func (k *lateKeeper) Keep(string, []byte, time.Time) error { return nil }

func (k *lateKeeper) asked() []time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.deadlines)
}

// TestTokenizationWaitsNoLongerThanItsBoundInAll: the bound on what
// tokenization adds to a request is one for the whole wait. A keeper is
// given no later a deadline than the request's bound, and a turn whose
// keeper answered past the bound is left to the text index at once rather
// than given a second bound at the engine (which would answer in time here).
func TestTokenizationWaitsNoLongerThanItsBoundInAll(t *testing.T) {
	earlier := strings.Repeat("the first turn of this conversation, ", 20)
	next := earlier + "and the second turn, which goes on"
	body := `{"model":"m","prompt":"` + next + `","max_tokens":1}`
	routerWith := func(bound time.Duration, keeper *lateKeeper) (*testRouter, *tokensSeen) {
		w := startTokenizingWorker(t, `[4,5,6]`)
		seen := &tokensSeen{}
		p, err := buildProxyWith(Config{Tokenize: TokenizeConfig{Enabled: true, Timeout: bound}}, affinity.PolicyCacheAware,
			[]Worker{{ID: 1, URL: w.URL, Role: RoleRegular}}, func(d *Deps) {
				d.Decider, d.Tokens = seen, keeper
				hashes := affinity.BlockHashes(nil, "m", []byte(next), 16)
				d.Index.Learn(affinity.Fact{Hash: hashes[len(hashes)-3], Worker: 1, Span: 1}) // the turn before went to 1
			})
		if err != nil {
			t.Fatal(err)
		}
		return &testRouter{proxy: p, url: serveProxy(t, p), set: p.deps.Metrics}, seen
	}

	keeper := &lateKeeper{}
	r, _ := routerWith(2*time.Millisecond, keeper) // under the keeper's own 5 ms
	if resp, b := post(t, r.url, "/v1/completions", body); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if asked := keeper.asked(); len(asked) != 1 || asked[0] > 2*time.Millisecond {
		t.Errorf("the keeper was given %v to answer, want at most the request's bound of 2 ms", asked)
	}

	keeper = &lateKeeper{late: 250 * time.Millisecond}
	r, seen := routerWith(200*time.Millisecond, keeper)
	if resp, b := post(t, r.url, "/v1/completions", body); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if len(keeper.asked()) != 1 {
		t.Fatalf("the keeper was asked %d times, want 1", len(keeper.asked()))
	}
	if got := seen.last(); got != nil {
		t.Errorf("the turn was routed on the engine's tokens %v after its keeper spent the bound", got)
	}
	if m := scrape(t, r); !strings.Contains(m, `vllm_router_kv_tokenize_total{result="slow"} 1`) {
		t.Errorf("tokenize counts:\n%s", grepLines(m, "kv_tokenize"))
	}
}
