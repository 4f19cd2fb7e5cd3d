package affinity

import "github.com/zeebo/xxh3"

// CacheID is what an engine caches a prompt's blocks under besides its
// text: the model the request names (a base model, or one of its LoRA
// adapters, whose blocks the engine keys apart) and the request's
// cache_salt (vLLM's per-request salt that keeps tenants' prefixes apart:
// it enters the hash of the prompt's first block, so every block of a
// salted prompt differs from the same text's unsalted or otherwise salted
// blocks). The router's chains start from its Seed, so a prefix matches
// only blocks cached under the same identity, as the engine's do.
type CacheID struct {
	Model string
	Salt  string
}

// saltDomain separates a salted seed's input from any model's name: a
// model's name holds no control character (the proxy refuses one), so no
// name hashes like a model and a salt together.
const saltDomain = "\x00cache_salt\x00"

// Seed is h[-1] of the identity's chains: ModelSeed(Model) without a salt,
// so unsalted requests hash as they always have (replicas of an older
// build agree on them); with one, a hash of the model and the salt.
func (c CacheID) Seed() uint64 {
	if c.Salt == "" {
		return ModelSeed(c.Model)
	}
	return xxh3.HashString(c.Model + saltDomain + c.Salt)
}
