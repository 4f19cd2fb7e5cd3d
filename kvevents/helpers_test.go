package kvevents

import "testing"

const testBlock = 4

// prompt is n blocks of made-up token IDs starting at first.
func prompt(first uint32, n int) []uint32 {
	ts := make([]uint32, n*testBlock)
	for i := range ts {
		ts[i] = first + uint32(i)
	}
	return ts
}

// stored is the event an engine sends when it caches tokens after parent,
// naming its blocks by its own hash function name.
func stored(name func(int) EngineHash, parent *EngineHash, tokens []uint32) Event {
	e := Event{Kind: Stored, Tokens: tokens, BlockSize: testBlock, Tier: true}
	for i := range len(tokens) / testBlock {
		e.Hashes = append(e.Hashes, name(i))
	}
	if parent != nil {
		e.Parent, e.HasParent = *parent, true
	}
	return e
}

func names(base EngineHash) func(int) EngineHash {
	return func(i int) EngineHash { return base + EngineHash(i) }
}

func encode(t testing.TB, enc Encoding, events ...Event) []byte {
	t.Helper()
	b, err := Encode(Batch{TS: 1.5, Events: events}, enc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func matched(s *Set, tokens []uint32) int { return s.Matched(s.Keys(nil, "", tokens)) }
