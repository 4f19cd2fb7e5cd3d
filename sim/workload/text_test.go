package workload

import (
	"bytes"
	"sync"
	"testing"
)

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestBlockTextIsBlockBytesLongAndDeterministic(t *testing.T) {
	for _, id := range []int64{0, 1, 2, 511, 1 << 40} {
		a, b := BlockText(id), NewTexts(0).Block(id)
		if len(a) != BlockBytes {
			t.Fatalf("BlockText(%d) has %d bytes, want %d", id, len(a), BlockBytes)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("BlockText(%d) differs between two text sources", id)
		}
	}
}

func TestDistinctIDsPartWithinTheHeaderAndDifferThroughout(t *testing.T) {
	const ids = 2000
	texts := make([][]byte, ids)
	for id := range texts {
		texts[id] = BlockText(int64(id))
	}
	const chunk = 256 // the router's default block size
	for i := 1; i < ids; i++ {
		a, b := texts[i-1], texts[i]
		if n := commonPrefix(a, b); n >= headerBytes {
			t.Fatalf("blocks %d and %d share %d leading bytes, want < %d", i-1, i, n, headerBytes)
		}
		for off := 0; off < BlockBytes; off += chunk {
			if bytes.Equal(a[off:off+chunk], b[off:off+chunk]) {
				t.Fatalf("blocks %d and %d have equal bytes at [%d, %d)", i-1, i, off, off+chunk)
			}
		}
	}
}

func TestBlockTextLooksLikeWordsOfAboutTokenBytes(t *testing.T) {
	text := BlockText(7)
	words := bytes.Fields(text[headerBytes:])
	perWord := float64(len(text)-headerBytes) / float64(len(words))
	if perWord < 3 || perWord > 7 {
		t.Fatalf("%.1f bytes per word, want text of short words", perWord)
	}
	for _, c := range text {
		if c != ' ' && (c < '0' || c > 'z') {
			t.Fatalf("byte %q in block text, want plain ASCII words", c)
		}
	}
}

func TestSeedGivesADisjointFamilyOfTexts(t *testing.T) {
	plain, salted := NewTexts(0), NewTexts(42)
	for id := int64(0); id < 100; id++ {
		if n := commonPrefix(plain.Block(id), salted.Block(id)); n >= headerBytes {
			t.Fatalf("block %d shares %d bytes across seeds", id, n)
		}
	}
	if !bytes.Equal(NewTexts(42).Block(3), salted.Block(3)) {
		t.Fatal("the same seed gave different texts")
	}
}

func TestBlockReturnsACopyTheCallerMayModify(t *testing.T) {
	texts := NewTexts(0)
	first := texts.Block(5)
	want := bytes.Clone(first)
	first[0] ^= 0xff
	if !bytes.Equal(texts.Block(5), want) {
		t.Fatal("modifying a returned block changed the cached text")
	}
}

// naivePrompt is the definition PromptFor must agree with.
func naivePrompt(texts *Texts, rec TraceRecord) []byte {
	var all []byte
	for _, id := range rec.HashIDs {
		all = appendText(all, texts.key(id), BlockBytes)
	}
	return all[:min(len(all), rec.InputLength*TokenBytes)]
}

func TestPromptIsTheBlocksCutToInputLength(t *testing.T) {
	texts := NewTexts(0)
	for _, rec := range []TraceRecord{
		{InputLength: 1, HashIDs: []int64{9}},
		{InputLength: 512, HashIDs: []int64{9}},
		{InputLength: 513, HashIDs: []int64{9, 10}},
		{InputLength: 1300, HashIDs: []int64{0, 4, 8}},
		{InputLength: 2000, HashIDs: []int64{0, 4}}, // too few ids: all of their text
	} {
		got := texts.Prompt(rec)
		if want := naivePrompt(texts, rec); !bytes.Equal(got, want) {
			t.Fatalf("Prompt(%+v): %d bytes differing from the naive concatenation of %d", rec, len(got), len(want))
		}
		if want := min(rec.InputLength, len(rec.HashIDs)*BlockTokens) * TokenBytes; len(got) != want {
			t.Fatalf("Prompt(%+v) has %d bytes, want %d", rec, len(got), want)
		}
	}
}

func TestSharedBytePrefixIsExactlyTheSharedIDs(t *testing.T) {
	a := PromptFor(TraceRecord{InputLength: 2048, HashIDs: []int64{0, 1, 2, 3}})
	b := PromptFor(TraceRecord{InputLength: 2048, HashIDs: []int64{0, 1, 7, 3}})
	n := commonPrefix(a, b)
	if n < 2*BlockBytes || n >= 2*BlockBytes+headerBytes {
		t.Fatalf("prompts sharing 2 block ids share %d bytes, want [%d, %d)", n, 2*BlockBytes, 2*BlockBytes+headerBytes)
	}
}

func TestCacheSlotCollisionsReturnTheRightText(t *testing.T) {
	texts := NewTexts(0)
	// Find two ids that map to the same cache slot.
	slotOf := map[uint64]int64{}
	var a, b int64 = -1, -1
	for id := int64(0); a < 0; id++ {
		slot := texts.key(id) % cacheSlots
		if other, ok := slotOf[slot]; ok {
			a, b = other, id
		}
		slotOf[slot] = id
	}
	wantA, wantB := appendText(nil, texts.key(a), BlockBytes), appendText(nil, texts.key(b), BlockBytes)
	for range 3 {
		if !bytes.Equal(texts.Block(a), wantA) || !bytes.Equal(texts.Block(b), wantB) {
			t.Fatalf("ids %d and %d sharing a cache slot returned the wrong text", a, b)
		}
	}
}

func TestTextsIsSafeForConcurrentUse(t *testing.T) {
	texts := NewTexts(1)
	rec := TraceRecord{InputLength: 5000, HashIDs: []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}
	want := naivePrompt(texts, rec)
	var wg sync.WaitGroup
	errs := make(chan int, 4)
	for g := range 4 {
		wg.Go(func() {
			for range 50 {
				if !bytes.Equal(texts.Prompt(rec), want) {
					errs <- g
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for g := range errs {
		t.Fatalf("goroutine %d saw a wrong prompt", g)
	}
}

func BenchmarkPromptFor(b *testing.B) {
	// 24 blocks, the conversation trace's mean; half of them repeat across iterations.
	rec := TraceRecord{InputLength: 24 * BlockTokens, HashIDs: make([]int64, 24)}
	b.SetBytes(int64(rec.InputLength * TokenBytes))
	next := int64(1 << 20)
	for b.Loop() {
		for i := range rec.HashIDs {
			if i%2 == 1 {
				rec.HashIDs[i] = next
				next++
			} else {
				rec.HashIDs[i] = int64(i)
			}
		}
		PromptFor(rec)
	}
}
