package sim

import (
	"slices"
	"testing"
	"time"
)

// outputOf is a Request.Output that generates the bytes of text(seed, ...): token i is the
// config's BytesPerToken bytes at i.
func outputOf(cfg Config, seed int) func(dst []byte, n int) []byte {
	return func(dst []byte, n int) []byte {
		return append(dst, text(seed, n*cfg.BytesPerToken)...)
	}
}

// generate runs request r alone until it has generated at least n tokens, and returns the count.
func generate(t *testing.T, e *Engine, r Request, n int) int {
	t.Helper()
	mustSubmit(t, e, r, 0)
	for {
		at, ok := e.NextEventAt()
		if !ok {
			t.Fatalf("request %d ended before generating %d tokens", r.ID, n)
		}
		e.Advance(at)
		if u, ok := e.Progress(r.ID); ok && u.Completion >= n {
			return u.Completion
		}
	}
}

func TestAContinuationFindsTheOutputOfACancelledRequestCached(t *testing.T) {
	cfg := DefaultConfig()
	prompt := text(1, 1000) // a trailing partial block, so the output's first block starts in the prompt
	cached := func(output func([]byte, int) []byte) (found, want int) {
		e := NewEngine(cfg)
		r := Request{ID: 1, Prompt: prompt, MaxTokens: 400, Output: output}
		generated := generate(t, e, r, 200)
		e.Cancel(1, time.Second)
		continuation := append(slices.Clone(prompt), outputOf(cfg, 2)(nil, generated)...)
		fedTokens := cfg.TokenCount(len(prompt)) + generated - 1 // the last token's KV is not computed
		return e.CachedTokens(continuation), fedTokens / cfg.BlockTokens * cfg.BlockTokens
	}
	if found, want := cached(outputOf(cfg, 2)); found != want {
		t.Fatalf("continuation found %d tokens cached, want %d: the prompt and the output's computed full blocks", found, want)
	}
	promptOnly := len(prompt) / cfg.BlockBytes() * cfg.BlockTokens
	if found, _ := cached(nil); found != promptOnly {
		t.Fatalf("without the output known, continuation found %d tokens cached, want the prompt's %d", found, promptOnly)
	}
}

func TestAFinishedRequestsOutputBlocksArePublishedAsStored(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CacheEvents = true
	e := NewEngine(cfg)
	prompt := text(1, 64*cfg.BytesPerToken) // four full blocks
	const maxTokens = 50
	mustSubmit(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: maxTokens, Output: outputOf(cfg, 2)}, 0)
	runAll(t, e)
	whole := append(slices.Clone(prompt), outputOf(cfg, 2)(nil, maxTokens-1)...)
	want := cfg.AppendBlockHashes(nil, whole)
	var stored []uint64
	var tokens []uint32
	for _, ev := range e.TakeCacheEvents(nil) {
		if !ev.Removed {
			stored = append(stored, ev.Hashes...)
			tokens = append(tokens, ev.Tokens...)
		}
	}
	if !slices.Equal(stored, want) {
		t.Fatalf("stored blocks %x, want the %d full blocks of prompt and output %x", stored, len(want), want)
	}
	if wantTokens := cfg.Tokens(nil, whole)[:len(want)*cfg.BlockTokens]; !slices.Equal(tokens, wantTokens) {
		t.Fatalf("stored events carry %d tokens that are not the prompt's and output's", len(tokens))
	}
	if e.KVUsage() != 0 {
		t.Fatalf("KV usage %v after the request finished: output blocks stay referenced", e.KVUsage())
	}
}

// TestAnOutputIsCachedOnlyAfterAPromptChainItHolds: two requests of one prompt admitted in the
// same step; the second finds the first's blocks still being computed and keeps its own, so its
// output has no cached chain to hang from and is not cached, while the first's is.
func TestAnOutputIsCachedOnlyAfterAPromptChainItHolds(t *testing.T) {
	cfg := DefaultConfig()
	e := NewEngine(cfg)
	prompt := text(1, 64*cfg.BytesPerToken)
	const maxTokens = 40
	// a step in progress, so that both are admitted together at its end
	mustSubmit(t, e, Request{ID: 3, Prompt: text(9, 400*cfg.BytesPerToken), MaxTokens: 1}, 0)
	mustSubmit(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: maxTokens, Output: outputOf(cfg, 2)}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: prompt, MaxTokens: maxTokens, Output: outputOf(cfg, 3)}, 0)
	runAll(t, e)
	promptTokens := 64
	continuation := func(seed int) []byte {
		return append(slices.Clone(prompt), outputOf(cfg, seed)(nil, maxTokens-1)...)
	}
	if got := e.CachedTokens(continuation(2)); got <= promptTokens {
		t.Fatalf("the first request's continuation found %d tokens cached, want its output's blocks past the prompt's %d", got, promptTokens)
	}
	if got := e.CachedTokens(continuation(3)); got != promptTokens {
		t.Fatalf("the second request's continuation found %d tokens cached, want the prompt's %d only", got, promptTokens)
	}
	// the long prompt's 25 blocks, the shared prompt's 4 and the first output's 2: no block of the
	// second output under another chain either
	if got := e.CachedBlocks(); got != 25+4+2 {
		t.Fatalf("%d blocks cached, want 31", got)
	}
}
