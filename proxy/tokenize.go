package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/wire"
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
	// CacheBytes bounds the memory their tokens take, 4 bytes a token
	// (--kv-events-tokenize-cache-bytes, default 64 MiB): an engine that
	// answers long lists cannot make the cache hold more.
	CacheBytes int
	// Alone keeps the tokens this replica learns to itself, not shared
	// with the tier's keepers (tokenize_share.go;
	// --kv-events-keep-tokens-alone). For comparisons.
	Alone bool
}

// The defaults of TokenizeConfig.
const (
	DefaultTokenizeTimeout = 20 * time.Millisecond
	defaultTokenCache      = 4096
	DefaultTokenCacheBytes = 64 << 20
	pathTokenize           = "/tokenize"
	maxTokenizeAnswer      = 64 << 20
	// templateTokens is how many tokens an engine may add to a prompt's
	// own (a chat template's): a tokenizer makes at most one token of a
	// byte of text, so an answer of more than the request's bytes and these
	// is a lie, refused before it is decoded.
	templateTokens = 4096
	// tokenJSONBytes is the most one token takes in the answer's JSON
	// ("4294967295, ").
	tokenJSONBytes = 12
)

// answerLimit bounds the answer to a /tokenize request of n bytes: the
// tokens it can honestly hold, and room for the rest of the answer.
func answerLimit(n int) int {
	return min((n+templateTokens)*tokenJSONBytes+4096, maxTokenizeAnswer)
}

// ErrTooManyTokens says an engine's /tokenize answer holds more tokens than
// the prompt could make.
var ErrTooManyTokens = errors.New("tokenize: more tokens than the prompt could make")

// The results of a tokenization, the values of vllm_router_kv_tokenize_total's
// result label.
const (
	tokenizedOK     = "ok"     // the engine answered within the bound
	tokenizedCached = "cached" // the prompt's tokens were known
	tokenizedPrefix = "prefix" // an earlier prompt's it starts with were known: routed on those, its own learned after
	tokenizedSlow   = "slow"   // past the bound: routed on the text index
	tokenizedFailed = "failed" // an error or a refusal: routed on the text index
	tokenizedPeer   = "peer"   // the keeper of the turn before's worker knew them (tokenize_share.go): routed on those, its own learned after
)

// tokenizer asks a candidate engine for the token IDs of a request's prompt
// or messages, chat template included, as the engine will compute them,
// through that worker's connection pool (so every connection passes the
// worker-host policy of the proxy's dialer). Its answers are cached by
// prompt and prefix: a prompt asked again is known whole, and a
// conversation's next turn, which starts with the turn before, is routed at
// once on the tokens of the longest earlier prompt it starts with while its
// own are learned in the background for the turn after. A prompt with no
// known prefix waits for the engine, within the bound; every failure or an
// answer later than the bound leaves the request to the text index,
// counted (a late one is still learned in the background).
type tokenizer struct {
	cfg     TokenizeConfig
	apiKey  string
	fleet   *Fleet
	next    atomic.Uint64 // which candidate to ask next
	cache   *tokenCache
	latency *metrics.PrometheusHistogram
	added   *metrics.PrometheusHistogram // every attach: what tokenization adds to a request
	results map[string]*metrics.Counter
	// learning bounds the prompts learned in the background at once; one
	// that finds it full is not learned (its next turn waits).
	learning chan struct{}
	// share, when set, is the tier's keepers of tokens, index what says
	// which earlier turn a prompt continues, keeping the gifts in flight
	// (tokenize_share.go).
	share   TokenShare
	index   *affinity.Index
	keeping chan struct{}
	shared  shareCounts
	ctx     context.Context // ends at close: the background asks stop
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// tokenizeBuckets are the bounds, in seconds, of the tokenization latency.
var tokenizeBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25}

// addedBuckets are the bounds, in seconds, of the latency tokenization adds
// to a request, a cached prompt's microseconds included.
var addedBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05}

// maxLearning bounds the background tokenizations at once, and learnTimeout
// each one: off the request path, they may take longer than the bound.
const (
	maxLearning  = 4
	learnTimeout = time.Second
)

func newTokenizer(cfg TokenizeConfig, apiKey string, fleet *Fleet, share TokenShare, index *affinity.Index,
	set *metrics.Set) *tokenizer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTokenizeTimeout
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = defaultTokenCache
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultTokenCacheBytes
	}
	cache := newTokenCache(cfg.CacheEntries, cfg.CacheBytes)
	set.NewGauge("vllm_router_kv_tokenize_cache_bytes", func() float64 { return float64(cache.size()) })
	t := &tokenizer{cfg: cfg, apiKey: apiKey, fleet: fleet, cache: cache,
		latency:  set.NewPrometheusHistogramExt("vllm_router_kv_tokenize_duration_seconds", tokenizeBuckets),
		added:    set.NewPrometheusHistogramExt("vllm_router_kv_tokenize_added_seconds", addedBuckets),
		results:  map[string]*metrics.Counter{},
		learning: make(chan struct{}, maxLearning),
		share:    share, index: index, keeping: make(chan struct{}, maxKeeping), shared: newShareCounts(set)}
	set.NewGauge("vllm_router_kv_token_share_in_flight", func() float64 { return float64(len(t.keeping)) })
	t.ctx, t.stop = context.WithCancel(context.Background())
	for _, r := range []string{tokenizedOK, tokenizedCached, tokenizedPrefix, tokenizedSlow, tokenizedFailed, tokenizedPeer} {
		t.results[r] = set.NewCounter(fmt.Sprintf(`vllm_router_kv_tokenize_total{result=%q}`, r))
	}
	return t
}

// close stops the background tokenizations and waits for them: after it,
// no goroutine of the tokenizer runs.
func (t *tokenizer) close() {
	if t != nil {
		t.stop()
		t.wg.Wait()
	}
}

// attach gives req the token IDs of x's prompt, or of the longest earlier
// prompt it starts with, unless the endpoint has none or tokenization fails
// or is slow.
func (t *tokenizer) attach(x *exchange, req *affinity.Request, pool *affinity.Pool) {
	if t == nil || pool.Len() == 0 || (x.ep != wire.ChatCompletions && x.ep != wire.Completions) {
		return
	}
	defer t.added.UpdateDuration(time.Now())
	p, ok := tokenizeRequest(x.ep, x.in.Model, x.body)
	if !ok {
		t.results[tokenizedFailed].Inc()
		return
	}
	if e, whole := t.cache.lookup(p); e != nil {
		req.Tokens = e.tokens
		if whole {
			t.results[tokenizedCached].Inc()
			return
		}
		req.TokenText = e.text
		t.results[tokenizedPrefix].Inc()
		t.learn(p, x.in.Text.Len(), pool, t.newShared(x, p, x.in.Text.Len()))
		return
	}
	// One bound for the whole wait: a keeper that answers late (a loaded
	// host's peer, scheduled tens of milliseconds after its deadline) leaves
	// the engine only what is left of it, not a second bound. Asked in
	// turn, the two stacked bounds added 25-100 ms to a third of a tier of
	// eight's turns in its first seconds (workersim, two cores).
	deadline := time.Now().Add(t.cfg.Timeout)
	if e := t.fromKeeper(req, pool, p, deadline); e != nil {
		req.Tokens, req.TokenText = e.tokens, e.text
		t.results[tokenizedPeer].Inc()
		t.learn(p, x.in.Text.Len(), pool, t.newShared(x, p, x.in.Text.Len()))
		return
	}
	m := t.candidate(pool)
	if m == nil {
		t.results[tokenizedFailed].Inc()
		return
	}
	start := time.Now()
	left := deadline.Sub(start)
	if left <= 0 {
		t.results[tokenizedSlow].Inc()
		t.learn(p, x.in.Text.Len(), pool, t.newShared(x, p, x.in.Text.Len()))
		return
	}
	tokens, err := t.ask(&x.life, m, p.body, left) // the exchange's life, not the RequestCtx fasthttp recycles
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.results[tokenizedSlow].Inc()
		t.learn(p, x.in.Text.Len(), pool, t.newShared(x, p, x.in.Text.Len())) // past the bound for this turn, but known for the next
	case err != nil:
		t.results[tokenizedFailed].Inc()
	default:
		t.latency.UpdateDuration(start)
		t.results[tokenizedOK].Inc()
		t.cache.put(p, tokens, x.in.Text.Len())
		t.learned(t.newShared(x, p, x.in.Text.Len()), tokens)
		req.Tokens = tokens
	}
}

// candidate is the next worker of pool to ask, in turn.
func (t *tokenizer) candidate(pool *affinity.Pool) *member {
	return t.fleet.view().members[pool.At(int(t.next.Add(1)%uint64(pool.Len()))).ID()]
}

// learn asks for p's tokens in the background, for the next turn that
// starts with it (here, and through sh at its keeper), unless maxLearning
// are being learned already.
func (t *tokenizer) learn(p prompt, text int, pool *affinity.Pool, sh *sharedPrompt) {
	m := t.candidate(pool)
	if m == nil {
		return
	}
	select {
	case t.learning <- struct{}{}:
	default:
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() { <-t.learning }()
		if tokens, err := t.ask(t.ctx, m, p.body, learnTimeout); err == nil {
			t.cache.put(p, tokens, text)
			t.learned(sh, tokens)
		}
	}()
}

// ask posts body to m's /tokenize over m's pool and reads the answer's
// tokens, within timeout.
func (t *tokenizer) ask(parent context.Context, m *member, body []byte, timeout time.Duration) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetHost(m.addr)
	req.SetRequestURI(m.base.Under(pathTokenize))
	req.Header.SetContentType("application/json")
	if t.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.apiKey)
	}
	answer, status, err := m.exchangeBody(ctx, req, body, resp, answerLimit(len(body)))
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline, the bound's, came before the context's timer.
		return nil, fmt.Errorf("tokenize: %w", context.DeadlineExceeded)
	}
	if err != nil {
		return nil, err
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("tokenize: status %d", status)
	}
	return tokensOf(answer, len(body)+templateTokens)
}

// exchangeBody sends req with body over m's pool and reads at most limit
// bytes of the answer, which stays valid until resp is released; ctx's end
// cuts the connection whatever it waits on.
func (m *member) exchangeBody(ctx context.Context, req *fasthttp.Request, body []byte, resp *fasthttp.Response,
	limit int) ([]byte, int, error) {
	lc := &ctxConn{ctx: ctx}
	now := time.Now()
	deadline, _ := ctx.Deadline()
	conn, err := m.up.exchange(ctx, lc, req, body, resp, now, deadline)
	if err != nil {
		return nil, 0, err
	}
	framed := resp.Header.ContentLength() != -2
	if hasBody(resp.StatusCode()) {
		err = readBody(conn.br, resp, limit)
	}
	intact := lc.detach(conn)
	m.up.release(conn, err == nil && intact && framed && !resp.ConnectionClose(), time.Now())
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, context.Cause(ctx)
		}
		return nil, 0, err
	}
	return resp.Body(), resp.StatusCode(), nil
}

// tokensOf reads vLLM's answer, {"count": n, "max_model_len": m,
// "tokens": [ids...]}, of at most most tokens.
func tokensOf(body []byte, most int) ([]uint32, error) {
	var answer struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if len(answer.Tokens) > most {
		return nil, fmt.Errorf("%w: %d tokens, at most %d", ErrTooManyTokens, len(answer.Tokens), most)
	}
	return answer.Tokens, nil
}
