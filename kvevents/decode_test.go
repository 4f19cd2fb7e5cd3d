package kvevents

import (
	"errors"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// vllmKeyed is a batch as current vLLM lays it out, built with the generic
// msgpack encoder rather than this package's: SHA-256 block names as bytes,
// and fields this package does not read.
func vllmKeyed(t *testing.T) []byte {
	t.Helper()
	b, err := msgpack.Marshal(map[string]any{
		"ts": 1733000000.25,
		"events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": [][]byte{[]byte("aaaa"), []byte("bbbb")},
				"parent_block_hash": nil, "token_ids": []int{1, 2, 3, 4, 5, 6, 7, 8}, "block_size": 4,
				"lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": []any{nil, nil},
				"group_idx": 0, "kv_cache_spec_kind": "full_attention"},
			map[string]any{"type": "BlockRemoved", "block_hashes": [][]byte{[]byte("aaaa")}, "medium": "GPU"},
			map[string]any{"type": "BlockStored", "block_hashes": []int{5}, "parent_block_hash": nil,
				"token_ids": []int{1, 2, 3, 4}, "block_size": 4, "medium": "CPU"},
			map[string]any{"type": "SomethingNewer", "x": 1},
			map[string]any{"type": "AllBlocksCleared"},
		},
		"data_parallel_rank": 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vllmPositional is a batch as earlier vLLM laid it out (array_like), with
// integer block names, one of them negative as Python's hash gives.
func vllmPositional(t *testing.T) []byte {
	t.Helper()
	b, err := msgpack.Marshal([]any{
		1733000000.5,
		[]any{
			[]any{"BlockStored", []int64{-7, 8}, int64(3), []int{1, 2, 3, 4, 5, 6, 7, 8}, 4, nil, "GPU"},
			[]any{"BlockRemoved", []int64{-7}, "GPU"},
			[]any{"AllBlocksCleared"},
		},
		0,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeReadsVLLMsKeyedBatches(t *testing.T) {
	b, err := Decode(vllmKeyed(t))
	if err != nil {
		t.Fatal(err)
	}
	kinds := []Kind{}
	for _, e := range b.Events {
		kinds = append(kinds, e.Kind)
	}
	if !slices.Equal(kinds, []Kind{Stored, Removed, Stored, Cleared}) {
		t.Fatalf("kinds %v: the unknown event must be skipped, the others kept in order", kinds)
	}
	s := b.Events[0]
	if len(s.Hashes) != 2 || s.HasParent || s.BlockSize != 4 || len(s.Tokens) != 8 || !s.Tier {
		t.Errorf("stored event read as %+v", s)
	}
	if b.Events[1].Hashes[0] != s.Hashes[0] {
		t.Error("the same bytes name gave two hashes")
	}
	if b.Events[2].Tier {
		t.Error("a CPU-tier store was read as a GPU one")
	}
	if b.TS != 1733000000.25 {
		t.Errorf("ts %v", b.TS)
	}
}

func TestDecodeReadsVLLMsPositionalBatches(t *testing.T) {
	b, err := Decode(vllmPositional(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 3 || b.Events[0].Kind != Stored || b.Events[1].Kind != Removed || b.Events[2].Kind != Cleared {
		t.Fatalf("events %+v", b.Events)
	}
	s := b.Events[0]
	if !s.HasParent || s.Parent != 3 || s.Hashes[0] != EngineHash(^uint64(6)) || b.Events[1].Hashes[0] != s.Hashes[0] {
		t.Errorf("stored event read as %+v", s)
	}
}

func TestEncodeAndDecodeAgreeInBothLayouts(t *testing.T) {
	parent := EngineHash(42)
	in := []Event{stored(names(1), &parent, prompt(1, 2)), {Kind: Removed, Hashes: []EngineHash{1}, Tier: true}, {Kind: Cleared, Tier: true}}
	for _, enc := range []Encoding{Keyed, Positional} {
		b, err := Decode(encode(t, enc, in...))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range b.Events {
			if e.Kind != in[i].Kind || !slices.Equal(e.Hashes, in[i].Hashes) || !slices.Equal(e.Tokens, in[i].Tokens) ||
				e.HasParent != in[i].HasParent || e.Parent != in[i].Parent {
				t.Errorf("layout %d event %d: %+v, want %+v", enc, i, e, in[i])
			}
		}
	}
}

func TestHostileBatchesAreRefusedBeforeAllocating(t *testing.T) {
	huge := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0x7f, 0xff, 0xff, 0xff} // [0.0, array of 2^31-1 events]
	mismatch, _ := msgpack.Marshal([]any{1.0, []any{[]any{"BlockStored", []int{1, 2}, nil, []int{1, 2, 3}, 4, nil, "GPU"}}})
	badSize, _ := msgpack.Marshal([]any{1.0, []any{[]any{"BlockStored", []int{1}, nil, []int{1}, 0, nil, "GPU"}}})
	negToken, _ := msgpack.Marshal([]any{1.0, []any{[]any{"BlockStored", []int{1}, nil, []int{-1}, 1, nil, "GPU"}}})
	for name, payload := range map[string][]byte{"2^31 events": huge, "tokens that do not fill the blocks": mismatch,
		"block size 0": badSize, "negative token": negToken, "empty": nil, "a string": []byte("\xa3abc"), "truncated": vllmKeyed(t)[:40]} {
		if _, err := Decode(payload); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(vllmKeyedSeed())
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload)
		if err != nil {
			return
		}
		s := NewSet(4, 1<<10)
		for _, e := range b.Events {
			if e.Kind == Stored && len(e.Tokens) != len(e.Hashes)*e.BlockSize {
				t.Fatalf("a stored event passed with %d tokens for %d blocks of %d", len(e.Tokens), len(e.Hashes), e.BlockSize)
			}
			_ = s.Apply(e)
		}
		if s.Len() > 1<<10 {
			t.Fatalf("the set grew past its bound: %d", s.Len())
		}
	})
}

func vllmKeyedSeed() []byte {
	b, _ := Encode(Batch{TS: 1, Events: []Event{stored(names(1), nil, prompt(1, 2))}}, Keyed)
	return b
}
