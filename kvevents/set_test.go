package kvevents

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestAStoredPromptMatchesItsBlocksAndItsPrefixes(t *testing.T) {
	s := NewSet(testBlock, 100)
	p := prompt(1, 3)
	if err := s.Apply(stored(names(10), nil, p)); err != nil {
		t.Fatal(err)
	}
	if got := matched(s, p); got != 3 {
		t.Errorf("the stored prompt matched %d blocks, want 3", got)
	}
	if got := matched(s, p[:2*testBlock+1]); got != 2 {
		t.Errorf("its prefix of 2 blocks and a token matched %d, want 2", got)
	}
	other := append(append([]uint32{}, p[:testBlock]...), prompt(500, 2)...)
	if got := matched(s, other); got != 1 {
		t.Errorf("a prompt sharing only its first block matched %d, want 1", got)
	}
}

func TestAContinuationChainsFromItsParentBlock(t *testing.T) {
	s := NewSet(testBlock, 100)
	p := prompt(1, 4)
	first := stored(names(10), nil, p[:2*testBlock])
	parent := first.Hashes[1]
	if err := s.Apply(first); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(stored(names(20), &parent, p[2*testBlock:])); err != nil {
		t.Fatal(err)
	}
	if got := matched(s, p); got != 4 {
		t.Errorf("matched %d blocks after the continuation, want 4", got)
	}
}

func TestTwoEnginesHashingDifferentlyGiveTheSameKeys(t *testing.T) {
	a, b := NewSet(testBlock, 100), NewSet(testBlock, 100)
	p := prompt(7, 3)
	_ = a.Apply(stored(names(1), nil, p))
	_ = b.Apply(stored(func(i int) EngineHash { return EngineHash(0xdead0000 ^ i*977) }, nil, p))
	if matched(a, p) != 3 || matched(b, p) != 3 {
		t.Errorf("matched %d and %d, want 3 and 3: keys must come from tokens, not engine names", matched(a, p), matched(b, p))
	}
	if a.Keys(nil, "adapter", p)[0] == a.Keys(nil, "", p)[0] {
		t.Error("an adapter's prompt shares a key with the base model's: the seed is not the identity's")
	}
}

func TestARemovedBlockEndsTheMatchThere(t *testing.T) {
	s := NewSet(testBlock, 100)
	p := prompt(1, 3)
	e := stored(names(10), nil, p)
	_ = s.Apply(e)
	_ = s.Apply(Event{Kind: Removed, Hashes: []EngineHash{e.Hashes[1]}, Tier: true})
	if got := matched(s, p); got != 1 {
		t.Errorf("matched %d after the second block was evicted, want 1", got)
	}
	if s.Len() != 2 {
		t.Errorf("the set holds %d blocks, want 2", s.Len())
	}
}

func TestClearedEmptiesTheSet(t *testing.T) {
	s := NewSet(testBlock, 100)
	_ = s.Apply(stored(names(10), nil, prompt(1, 3)))
	_ = s.Apply(Event{Kind: Cleared, Tier: true})
	if s.Len() != 0 {
		t.Errorf("%d blocks left after AllBlocksCleared", s.Len())
	}
}

func TestBlocksOfAnotherTierAreNotHits(t *testing.T) {
	s := NewSet(testBlock, 100)
	e := stored(names(10), nil, prompt(1, 2))
	e.Tier = false
	_ = s.Apply(e)
	if s.Len() != 0 {
		t.Errorf("a CPU-tier store put %d blocks in the GPU set", s.Len())
	}
}

func TestAChildOfAnUnknownBlockIsLeftOut(t *testing.T) {
	s := NewSet(testBlock, 100)
	unknown := EngineHash(99)
	if err := s.Apply(stored(names(10), &unknown, prompt(1, 2))); !errors.Is(err, ErrUnknownParent) {
		t.Errorf("err = %v, want ErrUnknownParent", err)
	}
	if s.Len() != 0 {
		t.Errorf("blocks keyed from an unknown parent were kept: %d", s.Len())
	}
}

func TestTheSetStaysWithinItsBound(t *testing.T) {
	s := NewSet(testBlock, 5)
	if err := s.Apply(stored(names(10), nil, prompt(1, 8))); !errors.Is(err, ErrFull) {
		t.Errorf("err = %v, want ErrFull", err)
	}
	if s.Len() != 5 {
		t.Errorf("the set holds %d blocks, bound 5", s.Len())
	}
}

func TestBlocksOfAnotherSizeAreRefused(t *testing.T) {
	s := NewSet(16, 100)
	if err := s.Apply(stored(names(10), nil, prompt(1, 2))); !errors.Is(err, ErrBlockSize) {
		t.Errorf("err = %v, want ErrBlockSize", err)
	}
}

func TestAnAdaptersBlocksAndTheBaseModelsNeverMatchEachOther(t *testing.T) {
	s := NewSet(testBlock, 100)
	p := prompt(1, 3)
	e := stored(names(10), nil, p)
	e.Identity = "sql-lora"
	if err := s.Apply(e); err != nil {
		t.Fatal(err)
	}
	if got := s.Matched(s.Keys(nil, "sql-lora", p)); got != 3 {
		t.Errorf("the adapter's own prompt matched %d blocks, want 3", got)
	}
	if got := s.Matched(s.Keys(nil, "", p)); got != 0 {
		t.Errorf("the base model's prompt matched %d blocks of the adapter's", got)
	}
}

// TestAFloodOfNamesForOneBlockStaysWithinTheBound is the flood that grew a
// replica by 540 MB: batches of stored events, each a new engine name over
// the same tokens. The names are bounded as the blocks are.
func TestAFloodOfNamesForOneBlockStaysWithinTheBound(t *testing.T) {
	const limit = 1000
	s := NewSet(testBlock, limit)
	p := prompt(1, 1)
	refused := 0
	for i := range 50_000 {
		if err := s.Apply(stored(names(EngineHash(1_000_000+i)), nil, p)); errors.Is(err, ErrFull) {
			refused++
		}
	}
	if s.Names() > limit || s.Len() != 1 {
		t.Errorf("%d names, %d blocks after the flood; bound %d", s.Names(), s.Len(), limit)
	}
	if refused != 50_000-limit {
		t.Errorf("%d stores refused, want %d", refused, 50_000-limit)
	}
	if s.Bytes() > 16*limit {
		t.Errorf("the tables hold %d bytes, over 16 a block of the bound", s.Bytes())
	}
}

// TestAFullSetCostsAtMost16BytesABlock measures the tables of a set filled
// to its bound.
func TestAFullSetCostsAtMost16BytesABlock(t *testing.T) {
	const limit = 1 << 14
	s := NewSet(testBlock, limit)
	for i := range limit {
		_ = s.Apply(stored(names(EngineHash(i*7+1)), nil, prompt(uint32(i*testBlock), 1)))
	}
	if s.Len() < limit-2 { // a pair of keys may share a fingerprint
		t.Fatalf("the set holds %d blocks, want about %d", s.Len(), limit)
	}
	s.TakeRemoved(nil)
	if per := float64(s.Bytes()-4*cap(s.removed)) / float64(s.Len()); per > 16 {
		t.Errorf("%.1f bytes a block, over 16", per)
	}
}

// TestANameFingerprintSharedByTwoBlocksDropsBoth: a set that cannot tell
// two engine names apart forgets the block of the earlier one rather than
// keep a block the engine may evict under the other.
func TestANameFingerprintSharedByTwoBlocksDropsBoth(t *testing.T) {
	s := NewSet(testBlock, 100)
	a, b := prompt(1, 1), prompt(100, 1)
	ka, kb := s.Keys(nil, "", a)[0], s.Keys(nil, "", b)[0]
	if err := s.StoreName(42, ka); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreName(42, kb); err != nil {
		t.Fatal(err)
	}
	if s.Has(ka) {
		t.Error("the earlier block is still held under a name now another's")
	}
	s.RemoveName(42)
	if s.Has(kb) || s.Len() != 0 {
		t.Errorf("after the name's removal the set holds %d blocks", s.Len())
	}
}

// TestTheTablesFindEveryEntryAfterRandomChurn checks the open addressing
// against a map: stores and removals at random, with growth and backward
// shifts, never lose or invent an entry.
func TestTheTablesFindEveryEntryAfterRandomChurn(t *testing.T) {
	const limit = 3000
	keys, names := newKeySet(), newEngineMap()
	wantKeys, wantNames := map[Key]bool{}, map[uint32]Key{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		k := Key(r.Uint32N(5000) + 1)
		fp := r.Uint32N(5000) + 1
		if r.IntN(3) == 0 {
			delete(wantKeys, k)
			keys.remove(k)
			delete(wantNames, fp)
			names.take(fp)
			continue
		}
		if keys.add(k, limit) {
			wantKeys[k] = true
		}
		if _, ok := names.put(fp, k, limit); ok {
			wantNames[fp] = k
		}
	}
	if keys.n != len(wantKeys) || names.n != len(wantNames) {
		t.Fatalf("counts %d/%d, want %d/%d", keys.n, names.n, len(wantKeys), len(wantNames))
	}
	for k := range Key(5001) {
		if k > 0 && keys.has(k) != wantKeys[k] {
			t.Fatalf("key %d: has %v, want %v", k, keys.has(k), wantKeys[k])
		}
		got, ok := names.get(uint32(k))
		if want, wok := wantNames[uint32(k)]; k > 0 && (ok != wok || got != want) {
			t.Fatalf("name %d: %d %v, want %d %v", k, got, ok, want, wok)
		}
	}
}
