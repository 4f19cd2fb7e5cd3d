package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestCacheEventsTellExactlyWhatTheCacheHolds replays the events into a set of its own after
// every step of a workload under cache pressure (shared prefixes, evictions) and compares it
// with the blocks the engine holds computed: a subscriber that hears every event knows the
// cache exactly. Each stored run follows a block the subscriber already holds, and carries the
// tokens of its blocks.
func TestCacheEventsTellExactlyWhatTheCacheHolds(t *testing.T) {
	cfg := Config{KVCapacityTokens: 64 * 16, MaxNumSeqs: 4, CacheEvents: true}.WithDefaults()
	e := NewEngine(cfg)
	rnd := rand.New(rand.NewPCG(1, 2))
	heard := map[uint64]bool{}
	var evicted, stored int
	now := time.Duration(0)
	for i := range 60 {
		prompt := append(text(rnd.IntN(4), 300), text(100+i, 200+rnd.IntN(600))...)
		if err := e.Submit(Request{ID: RequestID(i + 1), Prompt: prompt, MaxTokens: 4}, now); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			at, ok := e.NextEventAt()
			if !ok {
				break
			}
			now = at
			e.Advance(at)
			for _, ev := range e.TakeCacheEvents(nil) {
				if ev.Removed {
					evicted += len(ev.Hashes)
					for _, h := range ev.Hashes {
						if !heard[h] {
							t.Fatalf("removal of a block never stored")
						}
						delete(heard, h)
					}
					continue
				}
				if ev.HasParent && !heard[ev.Parent] {
					t.Fatalf("a stored run follows a block the subscriber does not hold")
				}
				if len(ev.Tokens) != len(ev.Hashes)*cfg.BlockTokens {
					t.Fatalf("%d tokens for %d blocks", len(ev.Tokens), len(ev.Hashes))
				}
				stored += len(ev.Hashes)
				for _, h := range ev.Hashes {
					heard[h] = true
				}
			}
			if held := computedBlocks(e); !sameSet(held, heard) {
				t.Fatalf("after step at %v the events say %d blocks, the cache holds %d", at, len(heard), len(held))
			}
		}
	}
	if evicted == 0 || stored == 0 {
		t.Errorf("stored %d, evicted %d: the workload must put the cache under pressure", stored, evicted)
	}
}

func TestStoredTokensAreThePromptsOwn(t *testing.T) {
	cfg := Config{CacheEvents: true}.WithDefaults()
	e := NewEngine(cfg)
	prompt := text(1, 3*cfg.BlockBytes()+7)
	if err := e.Submit(Request{ID: 1, Prompt: prompt, MaxTokens: 1}, 0); err != nil {
		t.Fatal(err)
	}
	runAll(t, e)
	evs := e.TakeCacheEvents(nil)
	if len(evs) != 1 || evs[0].HasParent || len(evs[0].Hashes) != 3 {
		t.Fatalf("events %+v, want one stored run of 3 blocks from the prompt's start", evs)
	}
	want := cfg.Tokens(nil, prompt)[:3*cfg.BlockTokens]
	if !slices.Equal(evs[0].Tokens, want) || !slices.Equal(evs[0].Hashes, cfg.AppendBlockHashes(nil, prompt)) {
		t.Error("the stored run's tokens or hashes are not the prompt's")
	}
	if again := e.TakeCacheEvents(nil); len(again) != 0 {
		t.Errorf("events handed out twice: %+v", again)
	}
}

func TestWithoutCacheEventsNothingIsLogged(t *testing.T) {
	e := NewEngine(Config{}.WithDefaults())
	_ = e.Submit(Request{ID: 1, Prompt: text(1, 2000), MaxTokens: 1}, 0)
	runAll(t, e)
	if evs := e.TakeCacheEvents(nil); len(evs) != 0 {
		t.Errorf("%d events logged with CacheEvents off", len(evs))
	}
}

func computedBlocks(e *Engine) map[uint64]bool {
	held := map[uint64]bool{}
	for h, slot := range e.kv.cache.index {
		if e.kv.cache.slab[slot].computed {
			held[h] = true
		}
	}
	return held
}

func sameSet(a, b map[uint64]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
