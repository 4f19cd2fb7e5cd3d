package kvevents

import (
	"errors"
	"testing"
)

func TestAStoredPromptMatchesItsBlocksAndItsPrefixes(t *testing.T) {
	s := NewSet("m", testBlock, 100)
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
	s := NewSet("m", testBlock, 100)
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
	a, b := NewSet("m", testBlock, 100), NewSet("m", testBlock, 100)
	p := prompt(7, 3)
	_ = a.Apply(stored(names(1), nil, p))
	_ = b.Apply(stored(func(i int) EngineHash { return EngineHash(0xdead0000 ^ i*977) }, nil, p))
	if matched(a, p) != 3 || matched(b, p) != 3 {
		t.Errorf("matched %d and %d, want 3 and 3: keys must come from tokens, not engine names", matched(a, p), matched(b, p))
	}
	if NewSet("other", testBlock, 1).Keys(nil, p)[0] == a.Keys(nil, p)[0] {
		t.Error("two models share a key: the seed is not the model's")
	}
}

func TestARemovedBlockEndsTheMatchThere(t *testing.T) {
	s := NewSet("m", testBlock, 100)
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
	s := NewSet("m", testBlock, 100)
	_ = s.Apply(stored(names(10), nil, prompt(1, 3)))
	_ = s.Apply(Event{Kind: Cleared, Tier: true})
	if s.Len() != 0 {
		t.Errorf("%d blocks left after AllBlocksCleared", s.Len())
	}
}

func TestBlocksOfAnotherTierAreNotHits(t *testing.T) {
	s := NewSet("m", testBlock, 100)
	e := stored(names(10), nil, prompt(1, 2))
	e.Tier = false
	_ = s.Apply(e)
	if s.Len() != 0 {
		t.Errorf("a CPU-tier store put %d blocks in the GPU set", s.Len())
	}
}

func TestAChildOfAnUnknownBlockIsLeftOut(t *testing.T) {
	s := NewSet("m", testBlock, 100)
	unknown := EngineHash(99)
	if err := s.Apply(stored(names(10), &unknown, prompt(1, 2))); !errors.Is(err, ErrUnknownParent) {
		t.Errorf("err = %v, want ErrUnknownParent", err)
	}
	if s.Len() != 0 {
		t.Errorf("blocks keyed from an unknown parent were kept: %d", s.Len())
	}
}

func TestTheSetStaysWithinItsBound(t *testing.T) {
	s := NewSet("m", testBlock, 5)
	if err := s.Apply(stored(names(10), nil, prompt(1, 8))); !errors.Is(err, ErrFull) {
		t.Errorf("err = %v, want ErrFull", err)
	}
	if s.Len() != 5 {
		t.Errorf("the set holds %d blocks, bound 5", s.Len())
	}
}

func TestBlocksOfAnotherSizeAreRefused(t *testing.T) {
	s := NewSet("m", 16, 100)
	if err := s.Apply(stored(names(10), nil, prompt(1, 2))); !errors.Is(err, ErrBlockSize) {
		t.Errorf("err = %v, want ErrBlockSize", err)
	}
}
