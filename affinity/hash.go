package affinity

import "github.com/zeebo/xxh3"

// DefaultBlockSize is the length in bytes of one hashed block of routing
// text (--block-size). 256 bytes is about 64 tokens.
const DefaultBlockSize = 256

// ModelSeed is the hash that precedes the first block of a request for model:
// requests for different models never share a prefix.
func ModelSeed(model string) uint64 { return xxh3.HashString(model) }

// BlockHashes appends to dst one chained hash per full block of text:
// h[i] = hash(block[i]) seeded by h[i-1], with h[-1] = ModelSeed(model).
// Two texts share their first k hashes exactly when they share their first
// k*blockSize bytes (up to hash collisions). A trailing partial block is not
// hashed: it cannot be a shared prefix yet.
func BlockHashes(dst []uint64, model string, text []byte, blockSize int) []uint64 {
	return Text{text}.blockHashes(dst, ModelSeed(model), blockSize, len(text)/blockSize)
}

// RequestHashes appends to dst the hashes the router routes text by: one per
// full block, at most maxBlocks of them (no engine of the fleet holds more,
// and a huge prompt must not insert millions of blocks into the index), or,
// for a text shorter than one block, its TailKey: the same short prompt then
// goes to the same worker. A longer text's partial last block is not hashed:
// its full blocks already make more than half of it, a hit at any
// --cache-threshold below 0.5, and a growing conversation never sends the
// same tail twice, so its tails would only take room in the index. It
// returns the hashes and how many of them are full blocks.
//
// The chain starts from seed, the request's cache identity (CacheID.Seed).
func RequestHashes(dst []uint64, seed uint64, text Text, blockSize, maxBlocks int) ([]uint64, int) {
	n := text.Len()
	blocks := min(n/blockSize, max(maxBlocks, 1))
	dst = text.blockHashes(dst, seed, blockSize, blocks)
	full := len(dst)
	if full == 0 && n > 0 {
		dst = append(dst, TailKey(seed, text, dst, blockSize))
	}
	return dst, full
}

// TailKey is a hash of the whole text, partial last block included, chained
// after the full blocks' hashes (or from seed, the cache identity, when
// there are none). Placement uses it as the key of a request whose full
// blocks are all known already (or that has none).
func TailKey(seed uint64, text Text, hashes []uint64, blockSize int) uint64 {
	if len(hashes) > 0 {
		seed = hashes[len(hashes)-1]
	}
	return text.hashFrom(len(hashes)*blockSize, seed^0x9e3779b97f4a7c15)
}

// mix64 is a 64-bit finalizer (splitmix64) used to score rendezvous pairs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// rendezvousScore is the highest-random-weight score of worker for key.
func rendezvousScore(key uint64, worker WorkerID) uint64 {
	return mix64(key ^ mix64(uint64(worker)+0x632be59bd9b4e019))
}
