package kvevents

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Key is the router's name of one cached block: a chain of hashes over the
// prompt's token IDs, block by block, started from its cache identity (the
// model or adapter). Two prompts share a block's key when they share every
// token up to the end of that block.
//
// A key is 32 bits, and the chain runs through those 32 bits: it is what a
// replica keeps per block (4 bytes in its set, 8 in the engine-name map
// beside it), so that a worker's 64 Ki blocks cost under a megabyte. The
// price is a false match of about one prompt block in 2^32 / n for a set
// of n blocks (1 in 65,000 at 64 Ki blocks, at the one block where a
// prompt's match would otherwise end), far below the false hits that
// evictions between a decision and its prefill cause.
type Key uint32

// Seed is the key every chain of a cache identity starts from: prompts of
// two models, or of a model and one of its adapters, never share blocks.
func Seed(identity string) Key { return fold(xxh3.HashString("kvevents\x00" + identity)) }

// Identity is the cache identity of a prompt run with adapter ("" for the
// base model) and salted with salt (vLLM's cache_salt, "" for none): what
// Seed starts its chains from. vLLM folds the salt into the hash of the
// prompt's first block only, so every block of a salted prompt differs
// from the same tokens' unsalted (or otherwise salted) blocks; starting
// the router's chain from the salt keeps them apart the same way. Without
// a salt it is the adapter's name, as the engines' lora_name gives it.
func Identity(adapter, salt string) string {
	if salt == "" {
		return adapter
	}
	return adapter + "\x00cache_salt\x00" + salt
}

// AppendKeys appends the router's key of every full block of tokens:
// key[i] = fold(xxh3(tokens of block i, seeded by key[i-1])), key[-1] =
// parent. A partial last block has no key: engines cache full blocks only.
func AppendKeys(dst []Key, parent Key, tokens []uint32, blockSize int) []Key {
	if blockSize < 1 {
		return dst
	}
	var buf [4 * MaxBlockSize]byte
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		b := buf[:4*blockSize]
		for i, t := range tokens[off : off+blockSize] {
			binary.LittleEndian.PutUint32(b[4*i:], t)
		}
		parent = fold(xxh3.HashSeed(b, uint64(parent)))
		dst = append(dst, parent)
	}
	return dst
}

// fold is a 64-bit hash's 32-bit fingerprint, never 0 (the tables' empty
// slot).
func fold(h uint64) Key {
	k := Key(h ^ h>>32)
	if k == 0 {
		k = 1
	}
	return k
}

// engineFP is the fingerprint an engine's block name is kept by. Engine
// names are mixed first: not every engine's hash is uniform (a Python
// tuple hash, a counter).
func engineFP(h EngineHash) uint32 {
	x := uint64(h)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return uint32(fold(x))
}
