package main

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/kvevents"
)

// engineView is a router's view of a worker's engine, fed by a subscriber.
type engineView struct {
	view  *kvevents.View
	block int
}

func (e engineView) Matched(tokens []uint32) int { return e.MatchedAs("", tokens) }

// MatchedAs is Matched of a prompt of the cache identity identity (kvevents.Identity).
func (e engineView) MatchedAs(identity string, tokens []uint32) int {
	return e.view.Matched(kvevents.AppendKeys(nil, kvevents.Seed(identity), tokens, e.block))
}

func (e engineView) Stats() (kvevents.Stats, int) {
	s := e.view.Status()
	return s.Stats, s.Blocks
}

// kvWorker is a worker publishing its KV events on loopback, with a small cache, and a
// subscriber hearing them as a router would.
func kvWorker(t *testing.T, capacityTokens int) (*testWorker, engineView) {
	t.Helper()
	cfg := testConfig()
	cfg.engine.KVCapacityTokens = capacityTokens
	return kvWorkerOf(t, cfg)
}

// kvWorkerOf is kvWorker of cfg.
func kvWorkerOf(t *testing.T, cfg serverConfig) (*testWorker, engineView) {
	t.Helper()
	cfg.engine.CacheEvents = true
	cfg.kvEvents, cfg.kvEventsReplay = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	w := startWorker(t, cfg)
	view := kvevents.NewView(kvevents.ViewConfig{BlockSize: cfg.engine.BlockTokens, MaxBlocks: 1 << 16})
	sub, err := kvevents.Subscribe(view, kvevents.SubscriberConfig{
		Endpoint: w.s.kv.pub.Endpoint(), ReplayEndpoint: w.s.kv.pub.ReplayEndpoint(),
		Allow: func(hostport string) (string, error) {
			if host, _, _ := net.SplitHostPort(hostport); host != "127.0.0.1" {
				return "", fmt.Errorf("%s is not loopback", hostport)
			}
			return hostport, nil
		},
		Retry: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	// A PUB socket drops what it sends before the subscription has reached
	// it: empty batches, which change no set, until one is heard, so the
	// test's first stores are not sent into that window.
	testwait.Eventually(t, 20*time.Second, func() bool {
		if err := w.s.kv.pub.Publish(kvevents.Batch{}); err != nil {
			t.Fatal(err)
		}
		st, _ := engineView{view, cfg.engine.BlockTokens}.Stats()
		return st.Live > 0 // heard live, not from the catch-up: subscribed
	}, "the subscriber hears the engine")
	return w, engineView{view, cfg.engine.BlockTokens}
}

func chatBody(content string) string {
	b, _ := json.Marshal(map[string]any{"model": "sim-model", "max_tokens": 2,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	return string(b)
}

// cachedTokens sends a chat request and returns the cached tokens of its usage.
func cachedTokens(t *testing.T, w *testWorker, content string) int {
	t.Helper()
	status, _, body := w.post(pathChatCompletions, chatBody(content))
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage.Details.Cached
}

func tokenize(t *testing.T, w *testWorker, content string) []uint32 {
	t.Helper()
	status, _, body := w.post(pathTokenize, chatBody(content))
	if status != 200 {
		t.Fatalf("tokenize: status %d: %s", status, body)
	}
	var r struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Count != len(r.Tokens) {
		t.Fatalf("tokenize answered %s (%v)", body, err)
	}
	return r.Tokens
}

// heard waits until the subscriber's match for tokens is want blocks.
func heard(t *testing.T, sub engineView, tokens []uint32, want int) {
	t.Helper()
	if !testwait.Holds(20*time.Second, func() bool { return sub.Matched(tokens) == want }) {
		st, n := sub.Stats()
		t.Fatalf("the subscriber matches %d blocks, want %d (stats %+v, %d blocks held)", sub.Matched(tokens), want, st, n)
	}
}

func words(seed, n int) string {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, "s%d-w%d ", seed, i)
	}
	return string(b[:n])
}

// TestTheKVEventsTellARouterWhatTheEngineWillFindCached compares, for each prompt, the blocks a
// subscriber believes the engine holds with the cached tokens the engine then reports: the
// same, through stores, evictions under a small cache, and a reset.
func TestTheKVEventsTellARouterWhatTheEngineWillFindCached(t *testing.T) {
	w, sub := kvWorker(t, 48*16)
	bt := w.s.cfg.engine.BlockTokens
	first := words(1, 1500)
	tokens := tokenize(t, w, first)
	if got := cachedTokens(t, w, first); got != 0 {
		t.Fatalf("a cold prompt found %d tokens cached", got)
	}
	full := (len(tokens) - 1) / bt // the blocks a repeat can hit: the last token is always computed
	heard(t, sub, tokens, len(tokens)/bt)
	if got := cachedTokens(t, w, first); got != full*bt {
		t.Errorf("the repeat found %d tokens cached; the events promised %d", got, full*bt)
	}

	var last string
	for i := range 4 { // other prompts evict the first one's blocks
		last = words(10+i, 1500)
		cachedTokens(t, w, last)
	}
	lastTokens := tokenize(t, w, last)
	heard(t, sub, lastTokens, len(lastTokens)/bt) // events arrive in order: all before it are heard
	evictedAsMatched(t, w, first, full, sub.Matched(tokens), "the subscriber")

	if status, _, body := w.post(pathResetPrefixCache, ""); status != 200 {
		t.Fatalf("reset: %d %s", status, body)
	}
	heard(t, sub, tokens, 0)
}

// evictedAsMatched checks a belief of matched blocks of prompt against the
// engine, once other prompts evicted some of its full blocks: the engine
// finds that many cached.
func evictedAsMatched(t *testing.T, w *testWorker, prompt string, full, matched int, who string) {
	t.Helper()
	bt := w.s.cfg.engine.BlockTokens
	m := min(matched, full)
	if m == full {
		t.Fatal("nothing of the first prompt was evicted: the cache is too large for this test")
	}
	if got := cachedTokens(t, w, prompt); got != m*bt {
		t.Errorf("after evictions %s matches %d blocks, the engine found %d tokens cached, not %d", who, m, got, m*bt)
	}
}

func TestTokenizeRefusesABodyWithoutAPrompt(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{}`, `[1]`, `{"prompt": 5}`, `not json`} {
		if status, _, _ := w.post(pathTokenize, body); status != 400 {
			t.Errorf("%s: status %d, want 400", body, status)
		}
	}
	if status, _, b := w.post(pathTokenize, `{"prompt":"abcdefgh"}`); status != 200 || string(b) == "" {
		t.Errorf("a prompt: %d %s", status, b)
	}
}
