package kvevents

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestASaltedPromptsBlocksMatchOnlyItsOwnSalt(t *testing.T) {
	p := prompt(1, 3)
	for _, tc := range []struct {
		name              string
		adapter, storedAs string
		salt, askedAs     string
		askAdapter        string
		want              int
	}{
		{name: "the same salt", salt: "tenant-a", askedAs: "tenant-a", want: 3},
		{name: "unsalted asks salted", salt: "tenant-a", askedAs: "", want: 0},
		{name: "salted asks unsalted", salt: "", askedAs: "tenant-a", want: 0},
		{name: "another salt", salt: "tenant-a", askedAs: "tenant-b", want: 0},
		{name: "an adapter's salted blocks", adapter: "sql-lora", askAdapter: "sql-lora", salt: "t", askedAs: "t", want: 3},
		{name: "the base model asks an adapter's", adapter: "sql-lora", salt: "t", askedAs: "t", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSet(testBlock, 100)
			e := stored(names(10), nil, p)
			e.Identity, e.Salt = tc.adapter, tc.salt
			if err := s.Apply(e); err != nil {
				t.Fatal(err)
			}
			if got := s.Matched(s.Keys(nil, Identity(tc.askAdapter, tc.askedAs), p)); got != tc.want {
				t.Fatalf("matched %d blocks, want %d", got, tc.want)
			}
		})
	}
}

// vllmSalted is one BlockStored as vLLM sends it for a salted prompt run
// with an adapter and an image: extra_keys per block, the first block's
// holding the adapter's name, the image's (identifier, offset) tuple and
// the salt.
func vllmSalted(t *testing.T, parent any, lora any, first any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(map[string]any{"ts": 1.0, "events": []any{
		map[string]any{"type": "BlockStored", "block_hashes": []int{7, 8}, "parent_block_hash": parent,
			"token_ids": []int{1, 2, 3, 4, 5, 6, 7, 8}, "block_size": 4, "lora_id": nil, "medium": "GPU",
			"extra_keys": []any{first, []any{"sql-lora"}}, "lora_name": lora},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFindsTheSaltAmongTheFirstBlocksExtraKeys(t *testing.T) {
	for _, tc := range []struct {
		name         string
		parent, lora any
		first        any
		identity     string
		salt         string
	}{
		{"an adapter, an image and a salt", nil, "sql-lora", []any{"sql-lora", []any{"img-digest", 0}, "tenant-a"}, "sql-lora", "tenant-a"},
		{"a salt alone", nil, nil, []any{"tenant-a"}, "", "tenant-a"},
		{"an adapter alone", nil, "sql-lora", []any{"sql-lora"}, "sql-lora", ""},
		{"no extra keys", nil, nil, nil, "", ""},
		{"a continuation has no salt of its own", 42, nil, []any{"tenant-a"}, "", ""},
		{"an adapter's integer id (earlier vLLM)", nil, "sql-lora", []any{int64(3), "tenant-a"}, "sql-lora", "tenant-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Decode(vllmSalted(t, tc.parent, tc.lora, tc.first))
			if err != nil {
				t.Fatal(err)
			}
			e := b.Events[0]
			if e.Identity != tc.identity || e.Salt != tc.salt || e.extra != nil {
				t.Fatalf("identity %q salt %q (extra %q), want %q and %q", e.Identity, e.Salt, e.extra, tc.identity, tc.salt)
			}
		})
	}
}

func TestEncodeCarriesTheAdapterAndTheSaltInBothLayouts(t *testing.T) {
	e := stored(names(1), nil, prompt(1, 2))
	e.Identity, e.Salt = "sql-lora", "tenant-a"
	for _, enc := range []Encoding{Keyed, Positional} {
		b, err := Decode(encode(t, enc, e))
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Events[0]; got.Identity != e.Identity || got.Salt != e.Salt {
			t.Errorf("layout %d: identity %q salt %q, want %q and %q", enc, got.Identity, got.Salt, e.Identity, e.Salt)
		}
	}
}
