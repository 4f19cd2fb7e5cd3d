package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// checkInvariants verifies the cache and queue bookkeeping against a recount from scratch.
func checkInvariants(t *testing.T, e *Engine) {
	t.Helper()
	c := &e.kv.cache
	if c.referenced+c.lruLen != len(c.index) {
		t.Fatalf("referenced %d + lru %d != indexed %d", c.referenced, c.lruLen, len(c.index))
	}
	if len(c.index)+c.private > c.capacity {
		t.Fatalf("indexed %d + private %d over capacity %d", len(c.index), c.private, c.capacity)
	}
	n := 0
	for slot := c.lruHead; slot != noSlot; slot = c.slab[slot].next {
		if c.slab[slot].refs != 0 || !c.slab[slot].computed {
			t.Fatalf("LRU holds a referenced or uncomputed block")
		}
		n++
	}
	if n != c.lruLen {
		t.Fatalf("LRU list has %d blocks, counter says %d", n, c.lruLen)
	}
	refs, private := 0, 0
	for _, s := range e.running.seqs {
		refs += len(s.blocks)
		private += s.private
	}
	slabRefs := 0
	for _, slot := range c.index {
		slabRefs += int(c.slab[slot].refs)
	}
	if refs != slabRefs || private != c.private {
		t.Fatalf("running hold %d refs / %d private, cache counts %d / %d", refs, private, slabRefs, c.private)
	}
	live := 0
	for _, s := range e.waiting.entries[e.waiting.head:] {
		if !s.cancelled {
			live++
		}
	}
	if live != e.waiting.live || len(e.running.seqs) > e.cfg.MaxNumSeqs {
		t.Fatalf("waiting %d live vs counter %d; running %d", live, e.waiting.live, len(e.running.seqs))
	}
}

// TestRandomWorkloadKeepsInvariants drives an engine with random submissions, cancellations and
// shared prefixes and checks its bookkeeping after every operation, and that every request ends
// exactly once.
func TestRandomWorkloadKeepsInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := NewEngine(Config{KVCapacityTokens: 4096, MaxNumSeqs: 8, MaxBatchedTokens: 512})
	bases := [][]byte{text(1, 8000), text(2, 8000), text(3, 8000)}
	first, done := map[RequestID]int{}, map[RequestID]int{}
	cancelled := map[RequestID]bool{}
	now := time.Duration(0)
	record := func(evs []Event) {
		for _, ev := range evs {
			if cancelled[ev.ID] {
				t.Fatalf("event %v for cancelled request %d", ev.Kind, ev.ID)
			}
			switch ev.Kind {
			case FirstToken:
				first[ev.ID]++
			case Done:
				if first[ev.ID] != 1 {
					t.Fatalf("request %d done without exactly one first token", ev.ID)
				}
				done[ev.ID]++
			}
		}
	}
	for id := range RequestID(2000) {
		now += time.Duration(rng.IntN(20)) * time.Millisecond
		record(e.Advance(now))
		base := bases[rng.IntN(len(bases))]
		r := Request{ID: id, Prompt: base[:1+rng.IntN(len(base)-1)], MaxTokens: 1 + rng.IntN(50),
			StreamTokens: rng.IntN(2) == 0}
		if err := e.Submit(r, now); err != nil {
			continue // too large for this small cache
		}
		if rng.IntN(5) == 0 {
			victim := RequestID(rng.IntN(int(id) + 1))
			if e.Cancel(victim, now) {
				cancelled[victim] = true
			}
		}
		checkInvariants(t, e)
	}
	record(runAll(t, e))
	checkInvariants(t, e)
	for id, n := range done {
		if n != 1 || cancelled[id] {
			t.Fatalf("request %d done %d times (cancelled %v)", id, n, cancelled[id])
		}
	}
	if len(done)+len(cancelled) < 1000 {
		t.Fatalf("only %d requests ended", len(done)+len(cancelled))
	}
}
