package kvevents

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the key every chain of a model starts from: prompts of two models
// never share blocks.
func Seed(model string) uint64 { return xxh3.HashString("kvevents\x00" + model) }

// AppendKeys appends the router's key of every full block of tokens:
// key[i] = xxh3(tokens of block i, seeded by key[i-1]), key[-1] = parent.
// A partial last block has no key: engines cache full blocks only.
func AppendKeys(dst []uint64, parent uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize < 1 {
		return dst
	}
	var buf [4 * MaxBlockSize]byte
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		b := buf[:4*blockSize]
		for i, t := range tokens[off : off+blockSize] {
			binary.LittleEndian.PutUint32(b[4*i:], t)
		}
		parent = xxh3.HashSeed(b, parent)
		dst = append(dst, parent)
	}
	return dst
}
