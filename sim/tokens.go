package sim

import "github.com/zeebo/xxh3"

// chainSeed is h[-1], the seed of the first block's hash. Every engine uses the same one, so a
// prompt hashes alike everywhere (vLLM seeds its chain with a fixed value too).
const chainSeed uint64 = 0x6b76726f75746572

// TokenCount is the number of tokens the engine counts for a text of n bytes:
// ceil(n / BytesPerToken).
func (c Config) TokenCount(n int) int {
	return (n + c.BytesPerToken - 1) / c.BytesPerToken
}

// BlockBytes is the number of prompt bytes one KV block covers: BlockTokens * BytesPerToken.
func (c Config) BlockBytes() int {
	return c.BlockTokens * c.BytesPerToken
}

// BlocksFor is the number of KV blocks that hold the given number of tokens, rounded up.
func (c Config) BlocksFor(tokens int) int {
	return (tokens + c.BlockTokens - 1) / c.BlockTokens
}

// AppendBlockHashes appends to dst the chained hash of every full block of prompt:
// h[i] = xxh3(block[i]) seeded with h[i-1]. A trailing partial block is not hashed, because
// like vLLM the engine caches only full blocks.
func (c Config) AppendBlockHashes(dst []uint64, prompt []byte) []uint64 {
	return c.appendBlockHashesFrom(dst, chainSeed, prompt)
}

// appendBlockHashesFrom is AppendBlockHashes of a chain that starts from h,
// a prompt's identity (identitySeed).
func (c Config) appendBlockHashesFrom(dst []uint64, h uint64, prompt []byte) []uint64 {
	size := c.BlockBytes()
	for off := 0; off+size <= len(prompt); off += size {
		h = xxh3.HashSeed(prompt[off:off+size], h)
		dst = append(dst, h)
	}
	return dst
}

// Tokens appends the token IDs the engine gives text: one per BytesPerToken bytes, the last
// one possibly shorter, each a hash of its bytes. It stands in for a tokenizer with the
// properties routing relies on: the same text always has the same IDs, a text that extends
// another on a token boundary extends its IDs, and block i of the IDs covers exactly the bytes
// that block i's hash covers.
func (c Config) Tokens(dst []uint32, text []byte) []uint32 {
	for off := 0; off < len(text); off += c.BytesPerToken {
		end := min(off+c.BytesPerToken, len(text))
		dst = append(dst, uint32(xxh3.Hash(text[off:end])>>33))
	}
	return dst
}

// hitLimitBlocks caps the blocks a prompt may find cached: at least its last token is always
// computed, since the engine needs its logits to generate (vLLM recomputes it too).
func (c Config) hitLimitBlocks(promptTokens int) int {
	if promptTokens < 1 {
		return 0
	}
	return (promptTokens - 1) / c.BlockTokens
}
