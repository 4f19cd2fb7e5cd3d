package sim

import (
	"slices"
	"testing"
	"time"
)

func TestThePromptsOfTwoIdentitiesShareNoBlock(t *testing.T) {
	prompt := text(1, 10*64)
	for _, tc := range []struct {
		name        string
		first, then Request
		cached      int
	}{
		{"the same adapter", Request{Adapter: "a"}, Request{Adapter: "a"}, 144},
		{"another adapter", Request{Adapter: "a"}, Request{Adapter: "b"}, 0},
		{"the base model after an adapter", Request{Adapter: "a"}, Request{}, 0},
		{"the same salt", Request{Salt: "t1"}, Request{Salt: "t1"}, 144},
		{"unsalted after salted", Request{Salt: "t1"}, Request{}, 0},
		{"salted after unsalted", Request{}, Request{Salt: "t1"}, 0},
		{"another salt", Request{Salt: "t1"}, Request{Salt: "t2"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(Config{})
			tc.first.ID, tc.first.Prompt, tc.first.MaxTokens = 1, prompt, 1
			tc.then.ID, tc.then.Prompt, tc.then.MaxTokens = 2, prompt, 1
			ttft(t, e, tc.first, 0)
			if _, u := ttft(t, e, tc.then, time.Second); u.Cached != tc.cached {
				t.Fatalf("cached %d tokens, want %d", u.Cached, tc.cached)
			}
		})
	}
}

func TestAnAdapterBeyondTheBatchsSlotsWaitsAndBaseRequestsPassIt(t *testing.T) {
	e := NewEngine(Config{MaxLoras: 1})
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 400), MaxTokens: 20, Adapter: "a"}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 400), MaxTokens: 1, Adapter: "b"}, 0)
	mustSubmit(t, e, Request{ID: 3, Prompt: text(3, 400), MaxTokens: 1}, 0)
	if got := e.WaitingAdapters(); !slices.Equal(got, []string{"b"}) || !slices.Equal(e.RunningAdapters(), []string{"a"}) {
		t.Fatalf("running %v waiting %v, want a running and b waiting", e.RunningAdapters(), got)
	}
	evs := runAll(t, e)
	aDone, bFirst := find(t, evs, 1, Done).At, find(t, evs, 2, FirstToken).At
	if bFirst <= aDone {
		t.Fatalf("b's first token at %v, before a ended at %v: two adapters ran in a batch of one slot", bFirst, aDone)
	}
	if base := find(t, evs, 3, FirstToken).At; base >= aDone {
		t.Fatalf("the base request waited behind b until %v", base)
	}
	if e.LoraLoads() != 2 {
		t.Fatalf("%d loads, want 2", e.LoraLoads())
	}
}

func TestASwapCostsItsStepTheLoadTime(t *testing.T) {
	cfg := Config{MaxLoras: 1, LoraSwapMs: 40}
	e := NewEngine(cfg)
	prompt := text(1, 64)
	cold, _ := ttft(t, e, Request{ID: 1, Prompt: prompt, MaxTokens: 1, Adapter: "a"}, 0)
	warm, _ := ttft(t, e, Request{ID: 2, Prompt: text(2, 64), MaxTokens: 1, Adapter: "a"}, time.Second)
	swapped, _ := ttft(t, e, Request{ID: 3, Prompt: text(3, 64), MaxTokens: 1, Adapter: "b"}, 2*time.Second)
	if cold-warm != 40*time.Millisecond || swapped-warm != 40*time.Millisecond {
		t.Fatalf("TTFT %v loading, %v resident, %v swapping: want the loads 40ms slower", cold, warm, swapped)
	}
	if e.LoraLoads() != 2 {
		t.Fatalf("%d loads, want 2 (a, then b in a's slot)", e.LoraLoads())
	}
	again, _ := ttft(t, e, Request{ID: 4, Prompt: text(4, 64), MaxTokens: 1, Adapter: "a"}, 3*time.Second)
	if again-warm != 40*time.Millisecond || e.LoraLoads() != 3 {
		t.Fatalf("a after b: TTFT %v, %d loads: want a load again (one slot)", again, e.LoraLoads())
	}
}

func TestTheLeastRecentlyRunAdapterIsSwappedOut(t *testing.T) {
	e := NewEngine(Config{MaxLoras: 2})
	at := time.Duration(0)
	for i, a := range []string{"a", "b", "a", "c", "a"} {
		ttft(t, e, Request{ID: RequestID(i + 1), Prompt: text(i, 64), MaxTokens: 1, Adapter: a}, at)
		at += time.Second
	}
	// a and b loaded; a runs again; c takes b's slot (b ran before a's rerun); a is still in.
	if e.LoraLoads() != 3 {
		t.Fatalf("%d loads, want 3", e.LoraLoads())
	}
}

func TestCacheEventsCarryTheAdapterAndTheFirstBlocksSalt(t *testing.T) {
	e := NewEngine(Config{CacheEvents: true})
	ttft(t, e, Request{ID: 1, Prompt: text(1, 4*64), MaxTokens: 1, Adapter: "a", Salt: "t"}, 0)
	evs := e.TakeCacheEvents(nil)
	if len(evs) == 0 || evs[0].HasParent || evs[0].Adapter != "a" || evs[0].Salt != "t" {
		t.Fatalf("events %+v, want the chain's start stored under a, salted t", evs)
	}
}
