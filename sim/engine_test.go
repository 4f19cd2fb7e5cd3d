package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRepeatedPromptHitsPrefixCache(t *testing.T) {
	e := NewEngine(Config{})
	prompt := text(1, 10*64+10) // 10 full blocks and a partial one: 163 tokens
	_, u1 := ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 4}, 0)
	_, u2 := ttft(t, e, Request{ID: 2, Prompt: prompt, MaxTokens: 4}, time.Second)
	if u1.Cached != 0 || u1.Prompt != 163 {
		t.Fatalf("first usage = %+v, want 163 prompt tokens, none cached", u1)
	}
	if u2.Cached != 160 {
		t.Fatalf("second usage = %+v, want the 10 full blocks (160 tokens) cached", u2)
	}
	if e.PrefixQueries() != 326 || e.PrefixHits() != 160 {
		t.Fatalf("queries/hits = %d/%d, want 326/160", e.PrefixQueries(), e.PrefixHits())
	}
}

func TestLastTokenIsNeverCached(t *testing.T) {
	e := NewEngine(Config{})
	prompt := text(1, 4*64) // exactly 4 blocks
	ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 1}, 0)
	_, u := ttft(t, e, Request{ID: 2, Prompt: prompt, MaxTokens: 1}, time.Second)
	if u.Cached != 48 {
		t.Fatalf("cached = %d, want 48: the block holding the last token is recomputed", u.Cached)
	}
}

func TestSharedPrefixOnlyHitsUpToDivergence(t *testing.T) {
	e := NewEngine(Config{})
	base := text(1, 6*64)
	a := append(append([]byte{}, base...), text(2, 300)...)
	b := append(append([]byte{}, base...), text(3, 300)...)
	ttft(t, e, Request{ID: 1, Prompt: a, MaxTokens: 1}, 0)
	_, u := ttft(t, e, Request{ID: 2, Prompt: b, MaxTokens: 1}, time.Second)
	if u.Cached != 6*16 {
		t.Fatalf("cached = %d, want the 6 shared blocks (96 tokens)", u.Cached)
	}
}

func TestCachedPromptFirstTokenComesSooner(t *testing.T) {
	e := NewEngine(Config{})
	prompt := text(1, 4000*4)
	cold, _ := ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 2}, 0)
	warm, u := ttft(t, e, Request{ID: 2, Prompt: prompt, MaxTokens: 2}, time.Second)
	cfg := e.Config()
	if cold != cfg.PrefillCost(4000) {
		t.Fatalf("cold TTFT = %v, want the prefill cost of 4000 tokens %v", cold, cfg.PrefillCost(4000))
	}
	if want := cfg.PrefillCost(4000 - u.Cached); warm != want {
		t.Fatalf("warm TTFT = %v, want the prefill cost of the %d uncached tokens %v",
			warm, 4000-u.Cached, want)
	}
	if warm*5 > cold {
		t.Fatalf("warm TTFT %v is not far below cold TTFT %v", warm, cold)
	}
}

func TestPrefillTimeGrowsWithUncachedTokens(t *testing.T) {
	var prev time.Duration
	for _, tokens := range []int{100, 1000, 4000, 8000} {
		got, _ := ttft(t, NewEngine(Config{}), Request{ID: 1, Prompt: text(1, tokens*4), MaxTokens: 1}, 0)
		if got <= prev {
			t.Fatalf("TTFT of %d tokens = %v, not above %v for fewer tokens", tokens, got, prev)
		}
		prev = got
	}
}

func TestLongPromptIsChunked(t *testing.T) {
	e := NewEngine(Config{MaxBatchedTokens: 1000})
	got, _ := ttft(t, e, Request{ID: 1, Prompt: text(1, 2500*4), MaxTokens: 1}, 0)
	cfg := e.Config()
	want := 2*cfg.PrefillCost(1000) + cfg.PrefillCost(500)
	if got != want {
		t.Fatalf("TTFT = %v, want three chunked steps %v", got, want)
	}
}

func TestLRUEvictsLeastRecentlyReleasedTailFirst(t *testing.T) {
	// 8 blocks; each request holds 2 indexed prompt blocks and 1 private block.
	e := NewEngine(Config{KVCapacityTokens: 8 * 16})
	prompts := [][]byte{text(1, 130), text(2, 130), text(3, 130), text(4, 130)}
	for i, p := range prompts[:3] {
		ttft(t, e, Request{ID: RequestID(i), Prompt: p, MaxTokens: 1}, time.Duration(i)*time.Second)
	}
	if e.CachedBlocks() != 6 {
		t.Fatalf("cached blocks = %d, want 6", e.CachedBlocks())
	}
	// The fourth prompt needs 3 blocks, 2 are free: the oldest tail block goes (prompt 0's second).
	ttft(t, e, Request{ID: 3, Prompt: prompts[3], MaxTokens: 1}, 3*time.Second)
	want := map[int]int{0: 16, 1: 32, 2: 32, 3: 32}
	for i, w := range want {
		if got := e.CachedTokens(prompts[i]); got != w {
			t.Errorf("prompt %d: %d tokens cached, want %d", i, got, w)
		}
	}
	if e.CachedBlocks() > e.NumGPUBlocks() {
		t.Fatalf("cache holds %d blocks over capacity %d", e.CachedBlocks(), e.NumGPUBlocks())
	}
}

func TestHitRefreshesRecency(t *testing.T) {
	e := NewEngine(Config{KVCapacityTokens: 8 * 16})
	prompts := [][]byte{text(1, 130), text(2, 130), text(3, 130), text(4, 130)}
	ttft(t, e, Request{ID: 0, Prompt: prompts[0], MaxTokens: 1}, 0)
	ttft(t, e, Request{ID: 1, Prompt: prompts[1], MaxTokens: 1}, time.Second)
	ttft(t, e, Request{ID: 2, Prompt: prompts[2], MaxTokens: 1}, 2*time.Second)
	ttft(t, e, Request{ID: 3, Prompt: prompts[0], MaxTokens: 1}, 3*time.Second) // touch prompt 0
	ttft(t, e, Request{ID: 4, Prompt: prompts[3], MaxTokens: 1}, 4*time.Second)
	if got := e.CachedTokens(prompts[0]); got != 32 {
		t.Errorf("recently used prompt 0 has %d tokens cached, want 32", got)
	}
	if got := e.CachedTokens(prompts[1]); got != 16 {
		t.Errorf("least recently used prompt 1 has %d tokens cached, want 16 (tail evicted)", got)
	}
}

func TestRequestsQueueBeyondMaxNumSeqs(t *testing.T) {
	e := NewEngine(Config{MaxNumSeqs: 2})
	for id := range RequestID(3) {
		mustSubmit(t, e, Request{ID: id, Prompt: text(int(id), 400), MaxTokens: 5}, 0)
	}
	// The first submission started a step alone; the others are scheduled when it ends.
	at, _ := e.NextEventAt()
	e.Advance(at)
	if e.Running() != 2 || e.Waiting() != 1 {
		t.Fatalf("running/waiting = %d/%d, want 2/1", e.Running(), e.Waiting())
	}
	evs := runAll(t, e)
	third := find(t, evs, 2, FirstToken)
	firstDone := find(t, evs, 0, Done)
	if third.At <= firstDone.At {
		t.Fatalf("queued request's first token at %v, before a slot freed at %v", third.At, firstDone.At)
	}
}

func TestRequestsQueueWhenKVIsFull(t *testing.T) {
	e := NewEngine(Config{KVCapacityTokens: 1024})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 2400), MaxTokens: 300}, 0) // 900 tokens
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 400), MaxTokens: 100}, 0)  // 200 tokens
	if e.Running() != 1 || e.Waiting() != 1 {
		t.Fatalf("running/waiting = %d/%d, want 1/1", e.Running(), e.Waiting())
	}
	if u := e.KVUsage(); u < 0.85 || u > 0.9 {
		t.Fatalf("KV usage = %v, want 57/64 blocks", u)
	}
	evs := runAll(t, e)
	if find(t, evs, 2, FirstToken).At <= find(t, evs, 1, Done).At {
		t.Fatal("second request started before the first released its KV")
	}
}

func TestCancelFreesCapacity(t *testing.T) {
	e := NewEngine(Config{MaxNumSeqs: 1})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 400), MaxTokens: 1000}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 400), MaxTokens: 3}, 0)
	run(e, 50*time.Millisecond)
	if !e.Cancel(1, 50*time.Millisecond) {
		t.Fatal("cancel of a running request reported it unknown")
	}
	if e.Running() != 0 || e.Waiting() != 1 {
		t.Fatalf("after cancel running/waiting = %d/%d, want 0/1", e.Running(), e.Waiting())
	}
	at, _ := e.NextEventAt() // the step in progress ends, then the queued request is admitted
	e.Advance(at)
	if e.Running() != 1 || e.Waiting() != 0 {
		t.Fatalf("after cancel running/waiting = %d/%d, want the queued request admitted", e.Running(), e.Waiting())
	}
	evs := runAll(t, e)
	if n := count(evs, 1, Done) + count(evs, 1, Token); n != 0 {
		t.Fatalf("cancelled request produced %d more events", n)
	}
	find(t, evs, 2, Done)
	if e.KVUsage() != 0 {
		t.Fatalf("KV usage %v after everything finished", e.KVUsage())
	}
	if e.Cancel(1, time.Second) {
		t.Fatal("second cancel reported the request unfinished")
	}
}

func TestCancelledRequestStopsConsumingCompute(t *testing.T) {
	finish := func(cancel bool) time.Duration {
		e := NewEngine(Config{MaxBatchedTokens: 2048})
		mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 40000*4), MaxTokens: 1}, 0)
		mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 100*4), MaxTokens: 200}, 0)
		run(e, 100*time.Millisecond)
		if cancel {
			e.Cancel(1, 100*time.Millisecond)
		}
		return find(t, runAll(t, e), 2, Done).At
	}
	with, without := finish(false), finish(true)
	if without >= with {
		t.Fatalf("cancelling the long prefill did not speed up its neighbour: %v vs %v", without, with)
	}
}

func TestCancelWaitingRequest(t *testing.T) {
	e := NewEngine(Config{MaxNumSeqs: 1})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 40), MaxTokens: 3}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 40), MaxTokens: 3}, 0)
	e.Cancel(2, 0)
	if e.Waiting() != 0 {
		t.Fatalf("waiting = %d after cancelling the queued request", e.Waiting())
	}
	if evs := runAll(t, e); count(evs, 2, FirstToken) != 0 {
		t.Fatal("cancelled queued request was served")
	}
}

func TestRemotePrefillSkipsPrefillCost(t *testing.T) {
	cfg := DefaultConfig()
	prompt := text(1, 4000*4)
	local, _ := ttft(t, NewEngine(cfg), Request{ID: 1, Prompt: prompt, MaxTokens: 2}, 0)
	remote, u := ttft(t, NewEngine(cfg), Request{ID: 1, Prompt: prompt, MaxTokens: 2, RemotePrefillTokens: 4000}, 0)
	transfer := cfg.TransferCost(4000)
	if remote < transfer || remote > transfer+cfg.DecodeCost(1) {
		t.Fatalf("remote TTFT = %v, want the transfer %v plus one decode step", remote, transfer)
	}
	if remote*4 > local {
		t.Fatalf("remote TTFT %v not far below local prefill %v", remote, local)
	}
	if u.Prompt != 4000 || u.Cached != 0 {
		t.Fatalf("usage = %+v, want 4000 prompt tokens, none cached locally", u)
	}
	e := NewEngine(cfg)
	ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 2, RemotePrefillTokens: 3000}, 0)
	if e.TransferredTokens() != 3000 || e.ComputedTokens() != 1000 {
		t.Fatalf("transferred/computed = %d/%d, want 3000/1000", e.TransferredTokens(), e.ComputedTokens())
	}
}

func TestTransferredPromptIsCachedAfterwards(t *testing.T) {
	e := NewEngine(Config{})
	prompt := text(1, 100*64+8)
	ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 2, RemotePrefillTokens: 10000}, 0)
	if got := e.CachedTokens(prompt); got != 1600 {
		t.Fatalf("cached after transfer = %d, want 1600", got)
	}
}

func TestStreamTokensReportsEveryToken(t *testing.T) {
	e := NewEngine(Config{})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 100), MaxTokens: 10, StreamTokens: true}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 100), MaxTokens: 10}, 0)
	evs := runAll(t, e)
	if n := count(evs, 1, Token); n != 9 {
		t.Fatalf("streamed request got %d token events, want 9", n)
	}
	if n := count(evs, 2, Token); n != 0 {
		t.Fatalf("non-streamed request got %d token events, want 0", n)
	}
	done := find(t, evs, 2, Done)
	if done.Usage != (Usage{Prompt: 25, Cached: 0, Completion: 10}) {
		t.Fatalf("final usage = %+v", done.Usage)
	}
}

// TestProgressCountsTheTokensGeneratedSoFar: a request's progress is what its stream showed up
// to the instant asked, without streaming every token; a finished request has none.
func TestProgressCountsTheTokensGeneratedSoFar(t *testing.T) {
	e := NewEngine(Config{})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 100), MaxTokens: 10}, 0)
	if u, ok := e.Progress(1); !ok || u.Completion != 0 {
		t.Fatalf("progress before any step = %+v, %v; want none generated, held", u, ok)
	}
	for first := false; !first; { // step by step up to the first token
		at, _ := e.NextEventAt()
		first = count(e.Advance(at), 1, FirstToken) == 1
	}
	for range 3 { // three decode steps
		at, _ := e.NextEventAt()
		e.Advance(at)
	}
	if u, ok := e.Progress(1); !ok || u.Completion != 4 || u.Prompt != 25 {
		t.Fatalf("progress = %+v, %v; want 4 of 10 tokens of a 25-token prompt, held", u, ok)
	}
	runAll(t, e)
	if u, ok := e.Progress(1); ok {
		t.Fatalf("a finished request has progress %+v", u)
	}
}

func TestEventsAreInTimeOrder(t *testing.T) {
	e := NewEngine(Config{})
	for id := range RequestID(20) {
		mustSubmit(t, e, Request{ID: id, Prompt: text(int(id), 1000+int(id)*300), MaxTokens: 5 + int(id), StreamTokens: true}, 0)
	}
	evs := runAll(t, e)
	for i := 1; i < len(evs); i++ {
		if evs[i].At < evs[i-1].At {
			t.Fatalf("event %d at %v precedes event %d at %v", i, evs[i].At, i-1, evs[i-1].At)
		}
	}
}

func TestSlowdownScalesStepTime(t *testing.T) {
	r := Request{ID: 1, Prompt: text(1, 2000), MaxTokens: 1}
	normal, _ := ttft(t, NewEngine(Config{}), r, 0)
	slow := NewEngine(Config{})
	if err := slow.SetSlowdown(10); err != nil {
		t.Fatal(err)
	}
	degraded, _ := ttft(t, slow, r, 0)
	if d := degraded - 10*normal; d < -10 || d > 10 {
		t.Fatalf("degraded TTFT = %v, want 10 x %v", degraded, normal)
	}
	if err := slow.SetSlowdown(0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetSlowdown(0) = %v, want ErrInvalidConfig", err)
	}
}

func TestSubmitRefusesDuplicatesAndOversizedRequests(t *testing.T) {
	e := NewEngine(Config{KVCapacityTokens: 256})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 40), MaxTokens: 3}, 0)
	if err := e.Submit(Request{ID: 1, Prompt: text(1, 40)}, 0); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate submit = %v", err)
	}
	if err := e.Submit(Request{ID: 2, Prompt: text(2, 1000), MaxTokens: 10}, 0); !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("oversized submit = %v", err)
	}
	if e.Waiting()+e.Running() != 1 {
		t.Fatal("a refused request was queued")
	}
}

func TestIdleEngineHasNoNextEvent(t *testing.T) {
	e := NewEngine(Config{})
	if _, ok := e.NextEventAt(); ok {
		t.Fatal("new engine reports an event")
	}
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 40), MaxTokens: 2}, time.Second)
	at, ok := e.NextEventAt()
	if !ok || at <= time.Second {
		t.Fatalf("next event = %v, %v; want a step ending after the submission", at, ok)
	}
	runAll(t, e)
	if _, ok := e.NextEventAt(); ok {
		t.Fatal("finished engine reports an event")
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cases := map[string]Config{
		"BlockTokens":      {BlockTokens: -1},
		"KVCapacityTokens": {KVCapacityTokens: 8},
		"MaxNumSeqs":       {MaxNumSeqs: -3},
		"PrefillBaseMs":    {PrefillBaseMs: -1},
		"Slowdown":         {Slowdown: -2},
	}
	for field, c := range cases {
		err := c.WithDefaults().Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v", field, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// TestARunningPrefillTakesTheStepBudgetFirst: as vLLM v1 schedules a step
// (its running requests first, then the waiting ones with the budget
// left), a short request that arrives while a long prompt is prefilled in
// chunks of the whole budget waits until the long prompt's last chunk,
// and goes in the first step with budget to spare: chunked prefill bounds
// its wait by the long prompt's remaining chunks, not by the long
// request's whole life.
func TestARunningPrefillTakesTheStepBudgetFirst(t *testing.T) {
	e := NewEngine(Config{MaxBatchedTokens: 512})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 2048*4), MaxTokens: 50}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 64), MaxTokens: 2}, time.Millisecond)
	evs := runAll(t, e)
	cfg := e.Config()
	longFirst := find(t, evs, 1, FirstToken).At
	if want := 4 * cfg.PrefillCost(512); longFirst != want {
		t.Fatalf("the long prompt's first token at %v, want four full chunks, %v", longFirst, want)
	}
	short := find(t, evs, 2, FirstToken).At
	if want := longFirst + cfg.PrefillCost(16) + cfg.DecodeCost(0); short < longFirst || short-want > cfg.DecodeCost(1) {
		t.Fatalf("the short request's first token at %v, want the step after the long prompt's last chunk, about %v",
			short, want)
	}
}
