package affinity

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// naiveHashes is the chain as the router has always computed it, from the
// whole text: the formula every replica of a tier must agree on.
func naiveHashes(model string, text []byte, blockSize, maxBlocks int) (hashes []uint64, tail uint64) {
	h := xxh3.HashString(model)
	for off := 0; off+blockSize <= len(text) && len(hashes) < maxBlocks; off += blockSize {
		h = xxh3.HashSeed(text[off:off+blockSize], h)
		hashes = append(hashes, h)
	}
	return hashes, xxh3.HashSeed(text[len(hashes)*blockSize:], h^0x9e3779b97f4a7c15)
}

// cut splits text into pieces at random places, empty pieces among them.
func cut(rng *rand.Rand, text []byte) Text {
	var t Text
	for len(text) > 0 {
		n := min(rng.IntN(3*len(text)/2+2)-1, len(text))
		if n < 0 {
			n = 0
		}
		t, text = append(t, text[:n]), text[n:]
	}
	return t
}

// TestTextHashesAgreeWhereverItIsCut: a text's hashes, its full blocks'
// count and its tail key are those of the whole text hashed as ever, for
// texts in pieces cut anywhere, for blocks that fit the stack's stage and
// blocks that do not, and for texts cut short by the most blocks hashed.
func TestTextHashesAgreeWhereverItIsCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 2000 {
		blockSize := []int{8, 256, 300, 2048}[round%4]
		text := make([]byte, rng.IntN(10*blockSize))
		for i := range text {
			text[i] = byte(rng.Uint32())
		}
		maxBlocks := 1 + rng.IntN(12)
		pieces := cut(rng, text)
		got, full := RequestHashes(nil, ModelSeed("m"), pieces, blockSize, maxBlocks)
		want, tail := naiveHashes("m", text, blockSize, maxBlocks)
		if full != len(want) || !slices.Equal(got[:full], want) {
			t.Fatalf("round %d: %d bytes in %d pieces, blocks of %d: hashes %x, want %x", round, len(text), len(pieces), blockSize, got[:full], want)
		}
		if gotTail := TailKey(ModelSeed("m"), pieces, got[:full], blockSize); gotTail != tail {
			t.Fatalf("round %d: tail key %x, want %x", round, gotTail, tail)
		}
		if full == 0 && len(text) > 0 && (len(got) != 1 || got[0] != tail) {
			t.Fatalf("round %d: a text shorter than a block is keyed %x, want its tail key %x", round, got, tail)
		}
		if pieces.Len() != len(text) || string(pieces.AppendTo(nil)) != string(text) {
			t.Fatalf("round %d: the pieces do not make the text", round)
		}
	}
}
