package kvevents

import (
	"slices"
	"testing"
)

// FuzzStreamAndSet drives a stream with what a hostile or broken publisher
// may send (numbers that jump, repeat and rewind; replays out of order;
// payloads that are valid batches, truncated ones or noise) and checks that
// the set stays bounded and self-consistent: every key it holds names an
// engine name that maps to it, so a removal can always find it; and a peer
// that applies the ops the stream relays holds the very same set.
func FuzzStreamAndSet(f *testing.F) {
	good := encodeBatch(f, Keyed, stored(names(1), nil, prompt(1, 3)))
	positional := encodeBatch(f, Positional, stored(names(9), nil, prompt(40, 2)))
	removal := encodeBatch(f, Keyed, Event{Kind: Removed, Tier: true, Hashes: []EngineHash{1, 9}})
	f.Add([]byte{0, 1, 2, 0, 5, 1}, good, positional)
	f.Add([]byte{0, 0, 4, 1}, good, positional) // both in order: more blocks than the bound
	f.Add([]byte{0, 0, 4, 1, 0, 3}, good, removal)
	f.Add([]byte{3, 0, 0, 9, 2, 2, 1, 0}, good[:len(good)/2], []byte{0x93, 0xc1})
	f.Fuzz(func(t *testing.T, ops, a, b []byte) {
		const limit = 4 // below the 5 blocks the seeds store together, so the bound is exercised
		s := NewStream(NewSet(testBlock, limit))
		peer := NewSet(testBlock, limit)
		s.OnApplied(func(a Applied) {
			if a.Fresh {
				peer.Reset()
			}
			peer.ApplyOps(a.Ops)
		})
		payloads := [][]byte{a, b, encodeBatch(t, Keyed, Event{Kind: Cleared, Tier: true})}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			seq := uint64(arg % 16)
			p := payloads[int(op>>2)%len(payloads)]
			switch op % 4 {
			case 0:
				if _, gap := s.Offer(seq, p); gap && arg&1 == 1 {
					s.EndReplay()
				}
			case 1:
				s.Replayed(seq, p)
			case 2:
				s.EndReplay()
			case 3:
				s.Rejoin()
			}
			checkSet(t, s.Set(), limit)
			if _, _, started := s.Position(); started && s.pending == nil && !s.fresh {
				sameContent(t, s.Set(), peer)
			}
		}
	})
}

func checkSet(t *testing.T, s *Set, limit int) {
	t.Helper()
	if s.Len() > limit || s.Names() > limit {
		t.Fatalf("the set holds %d blocks and %d names, over its bound %d", s.Len(), s.Names(), limit)
	}
	named := map[Key]bool{}
	s.engine.each(func(fp uint32, k Key) {
		named[k] = true
		if got, ok := s.engine.get(fp); !ok || got != k {
			t.Fatalf("name %x maps to %x, but is found as %x, %v", fp, k, got, ok)
		}
	})
	names, keys := s.Content(nil, nil)
	if len(names) != s.Names() || len(keys) != s.Len() {
		t.Fatalf("the tables hold %d names and %d keys, counted %d and %d", len(names), len(keys), s.Names(), s.Len())
	}
	for _, k := range keys {
		if !named[k] || !s.Has(k) {
			t.Fatalf("key %x held without a name, or not found", k)
		}
	}
}

// sameContent fails unless a and b hold the same names and keys.
func sameContent(t *testing.T, a, b *Set) {
	t.Helper()
	an, ak := a.Content(nil, nil)
	bn, bk := b.Content(nil, nil)
	slices.Sort(an)
	slices.Sort(bn)
	slices.Sort(ak)
	slices.Sort(bk)
	if !slices.Equal(an, bn) || !slices.Equal(ak, bk) {
		t.Fatalf("the peer's set differs: %d/%d names, %d/%d keys", len(an), len(bn), len(ak), len(bk))
	}
}

func encodeBatch(tb testing.TB, enc Encoding, events ...Event) []byte {
	tb.Helper()
	b, err := Encode(Batch{TS: 1, Events: events}, enc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
