package kvevents

// Kind is what an event says happened to the engine's cache.
type Kind uint8

const (
	// Stored: the engine computed and cached full blocks.
	Stored Kind = iota + 1
	// Removed: the engine evicted blocks.
	Removed
	// Cleared: the engine dropped its whole cache (a reset).
	Cleared
)

func (k Kind) String() string {
	switch k {
	case Stored:
		return "BlockStored"
	case Removed:
		return "BlockRemoved"
	case Cleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// EngineHash is an engine's name for one block: vLLM sends an integer or
// (since it hashes with SHA-256) bytes; bytes are folded to 64 bits here.
type EngineHash uint64

// Event is one cache change of one engine.
type Event struct {
	Kind Kind
	// Hashes are the engine's names of the blocks stored or removed, in
	// prefix order for Stored.
	Hashes []EngineHash
	// Parent is the engine's name of the block the first stored block
	// follows; HasParent is false when the first block starts a prompt.
	Parent    EngineHash
	HasParent bool
	// Tokens are the token IDs of the stored blocks, BlockSize per block.
	Tokens    []uint32
	BlockSize int
	// Identity is the cache identity the stored blocks belong to: the LoRA
	// adapter they were computed with ("" for the base model). A chain
	// without a parent starts from Seed(Identity(Identity, Salt)).
	Identity string
	// Salt is the prompt's cache_salt, for a chain without a parent: vLLM
	// puts it last among the first block's extra_keys (after the adapter's
	// name and the multimodal identifiers), "" when it has none.
	Salt string
	// extra are the strings of the first block's extra_keys as decoded,
	// until the salt is found among them (decode.go).
	extra []string
	// Tier is false when the event concerns another medium than the GPU
	// (an offloading connector's CPU or disk tier) or another KV-cache group
	// than the first: such blocks do not make a prefill hit here.
	Tier bool
}

// Batch is one numbered message of a publisher: the events of one engine
// step, in order.
type Batch struct {
	TS     float64
	Events []Event
}
