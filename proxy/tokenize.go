package proxy

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fastjson"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// TokenizeConfig is how the proxy asks engines for a prompt's token IDs
// (vLLM's POST /tokenize), for routing on the engines' KV events. Off unless
// Enabled.
type TokenizeConfig struct {
	Enabled bool
	// Timeout bounds the latency tokenization adds to a request; past it the
	// request routes on the text index (--kv-events-tokenize-timeout,
	// default 20 ms).
	Timeout time.Duration
	// CacheEntries bounds the prompts whose tokens are kept (default 4096).
	CacheEntries int
}

// The defaults of TokenizeConfig.
const (
	DefaultTokenizeTimeout = 20 * time.Millisecond
	defaultTokenCache      = 4096
	pathTokenize           = "/tokenize"
	maxTokenizeAnswer      = 64 << 20
)

// The results of a tokenization, the values of vllm_router_kv_tokenize_total's
// result label.
const (
	tokenizedOK     = "ok"     // the engine answered within the bound
	tokenizedCached = "cached" // the prompt's tokens were known
	tokenizedSlow   = "slow"   // past the bound: routed on the text index
	tokenizedFailed = "failed" // an error or a refusal: routed on the text index
)

// tokenizer asks a candidate engine for the token IDs of a request's prompt
// or messages, chat template included, as the engine will compute them. Its
// answers are cached by model and prompt; every failure or an answer later
// than the bound leaves the request to the text index, counted.
type tokenizer struct {
	cfg     TokenizeConfig
	client  *http.Client
	fleet   *Fleet
	next    atomic.Uint64 // which candidate to ask next
	cache   *tokenCache
	latency *metrics.PrometheusHistogram
	added   *metrics.PrometheusHistogram // every attach: what tokenization adds to a request
	results map[string]*metrics.Counter
}

// tokenizeBuckets are the bounds, in seconds, of the tokenization latency.
var tokenizeBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25}

// addedBuckets are the bounds, in seconds, of the latency tokenization adds
// to a request, a cached prompt's microseconds included.
var addedBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05}

func newTokenizer(cfg TokenizeConfig, fleet *Fleet, dialer *workerurl.Dialer, set *metrics.Set) *tokenizer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTokenizeTimeout
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = defaultTokenCache
	}
	t := &tokenizer{cfg: cfg, fleet: fleet, cache: newTokenCache(cfg.CacheEntries),
		latency: set.NewPrometheusHistogramExt("vllm_router_kv_tokenize_duration_seconds", tokenizeBuckets),
		added:   set.NewPrometheusHistogramExt("vllm_router_kv_tokenize_added_seconds", addedBuckets),
		results: map[string]*metrics.Counter{}}
	for _, r := range []string{tokenizedOK, tokenizedCached, tokenizedSlow, tokenizedFailed} {
		t.results[r] = set.NewCounter(fmt.Sprintf(`vllm_router_kv_tokenize_total{result=%q}`, r))
	}
	// Every connection passes the worker-host policy (the dialer); none
	// outlives close.
	t.client = &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 30 * time.Second}}
	return t
}

// close drops the idle connections: after it, no goroutine of the
// tokenizer runs.
func (t *tokenizer) close() {
	if t != nil {
		t.client.CloseIdleConnections()
	}
}

// attach gives req the token IDs of x's prompt, asked of a candidate of
// pool, unless the endpoint has none or tokenization fails or is slow.
func (t *tokenizer) attach(x *exchange, req *affinity.Request, pool *affinity.Pool) {
	if t == nil || pool.Len() == 0 || (x.ep != chatCompletions && x.ep != completions) {
		return
	}
	defer t.added.UpdateDuration(time.Now())
	body, key, ok := tokenizeBody(x.ep, x.in.model, x.body)
	if !ok {
		t.results[tokenizedFailed].Inc()
		return
	}
	if tokens, ok := t.cache.get(key); ok {
		t.results[tokenizedCached].Inc()
		req.Tokens = tokens
		return
	}
	m := t.fleet.view().members[pool.At(int(t.next.Add(1)%uint64(pool.Len()))).ID()]
	if m == nil {
		t.results[tokenizedFailed].Inc()
		return
	}
	start := time.Now()
	tokens, err := t.ask(x.ctx, m.base, body)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.results[tokenizedSlow].Inc()
	case err != nil:
		t.results[tokenizedFailed].Inc()
	default:
		t.latency.UpdateDuration(start)
		t.results[tokenizedOK].Inc()
		t.cache.put(key, tokens)
		req.Tokens = tokens
	}
}

// ask posts body to base's /tokenize and reads the answer's tokens, within
// the bound.
func (t *tokenizer) ask(parent context.Context, base workerurl.URL, body []byte) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(parent, t.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base.String()+pathTokenize, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenizeAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tokenize: status %d", resp.StatusCode)
	}
	return tokensOf(answer)
}

// tokensOf reads vLLM's answer: {"count": n, "max_model_len": m,
// "tokens": [ids...]}.
func tokensOf(body []byte) ([]uint32, error) {
	var answer struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return answer.Tokens, nil
}

// tokenizeBody is vLLM's /tokenize request for a client's body:
// {"model", "messages"} for a chat (the template applied with the
// generation prompt, as the chat endpoint applies it) or {"model", "prompt"}
// for a completion whose prompt is one string; key names it in the cache.
func tokenizeBody(ep *endpoint, model string, body []byte) (out []byte, key uint64, ok bool) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, 0, false
	}
	field := v.Get(ep.textField)
	if field == nil || (ep == completions && field.Type() != fastjson.TypeString) ||
		(ep == chatCompletions && field.Type() != fastjson.TypeArray) {
		return nil, 0, false
	}
	m, _ := json.Marshal(model)
	out = append(append([]byte(`{"model":`), m...), `,"`+ep.textField+`":`...)
	out = field.MarshalTo(out)
	out = append(out, '}')
	return out, xxh3.Hash(out), true
}

// tokenCache is the tokens of the latest prompts, least recently used out.
type tokenCache struct {
	mu    sync.Mutex
	limit int
	order *list.List // of *tokenEntry, newest first
	byKey map[uint64]*list.Element
}

type tokenEntry struct {
	key    uint64
	tokens []uint32
}

func newTokenCache(limit int) *tokenCache {
	return &tokenCache{limit: limit, order: list.New(), byKey: map[uint64]*list.Element{}}
}

func (c *tokenCache) get(key uint64) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*tokenEntry).tokens, true
}

func (c *tokenCache) put(key uint64, tokens []uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.byKey[key] = c.order.PushFront(&tokenEntry{key: key, tokens: tokens})
	for c.order.Len() > c.limit {
		old := c.order.Remove(c.order.Back()).(*tokenEntry)
		delete(c.byKey, old.key)
	}
}
