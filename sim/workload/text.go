package workload

import (
	"sync/atomic"
)

// Sizes of synthesised text.
const (
	// TokenBytes is the number of bytes of text that stand for one token.
	TokenBytes = 4
	// BlockTokens is the number of tokens a trace block id stands for (Mooncake's block size).
	BlockTokens = 512
	// BlockBytes is the length of the text of one block: BlockTokens * TokenBytes.
	BlockBytes = BlockTokens * TokenBytes
)

// headerBytes is the length of the hexadecimal key that opens every synthesised text. Keys are
// distinct for distinct ids, so two texts part within this many bytes.
const headerBytes = 16

// cacheSlots is the number of block texts a Texts keeps (direct-mapped, about 8 MiB when full).
// A trace holds far more distinct ids than fit (the conversation trace has 183k, 374 MB of text),
// so the cache keeps the hot ones, above all the shared system-prompt block, and regenerating a
// cold block costs about a microsecond.
const cacheSlots = 4096

// cachedBlock is one immutable entry of the block cache.
type cachedBlock struct {
	id   int64
	text []byte
}

// Texts turns trace block ids into deterministic text. The same (seed, id) always gives the same
// BlockBytes bytes; different ids give texts that differ within their first 16 bytes and
// throughout. A seed other than zero gives a disjoint family of texts, so that a second run does
// not hit the caches that a first run warmed.
//
// A Texts is safe for concurrent use; its zero value is not usable, call NewTexts.
type Texts struct {
	salt  uint64
	slots [cacheSlots]atomic.Pointer[cachedBlock]
}

// defaultTexts backs BlockText and PromptFor (seed 0).
var defaultTexts = NewTexts(0)

// NewTexts returns a text source for the given seed.
func NewTexts(seed int64) *Texts {
	// mix64(0) == 0, so seed 0 keeps the plain keys.
	return &Texts{salt: mix64(uint64(seed))}
}

// BlockText returns the text of block id with seed 0: BlockBytes bytes, a fresh copy.
func BlockText(id int64) []byte { return defaultTexts.Block(id) }

// PromptFor returns the prompt of rec with seed 0 (see Texts.Prompt).
func PromptFor(rec TraceRecord) []byte { return defaultTexts.Prompt(rec) }

// Block returns the text of block id: BlockBytes bytes, a fresh copy the caller may modify.
func (t *Texts) Block(id int64) []byte {
	return t.AppendBlock(make([]byte, 0, BlockBytes), id)
}

// AppendBlock appends the text of block id to dst and returns the extended slice.
func (t *Texts) AppendBlock(dst []byte, id int64) []byte {
	return append(dst, t.block(id)...)
}

// Prompt returns the prompt of rec: the texts of its blocks in order, the last one cut so that the
// prompt is InputLength*TokenBytes bytes. A record with fewer ids than its length needs (LoadTrace
// refuses those) gives a shorter prompt: the text of all its blocks.
func (t *Texts) Prompt(rec TraceRecord) []byte {
	want := rec.InputLength * TokenBytes
	if limit := len(rec.HashIDs) * BlockBytes; want > limit {
		want = limit
	}
	if want <= 0 {
		return []byte{}
	}
	prompt := make([]byte, 0, want)
	for _, id := range rec.HashIDs {
		text := t.block(id)
		if rest := want - len(prompt); len(text) > rest {
			text = text[:rest]
		}
		prompt = append(prompt, text...)
		if len(prompt) == want {
			break
		}
	}
	return prompt
}

// block returns the shared, read-only text of id, from the cache when present.
func (t *Texts) block(id int64) []byte {
	key := t.key(id)
	slot := &t.slots[key%cacheSlots]
	if cached := slot.Load(); cached != nil && cached.id == id {
		return cached.text
	}
	text := appendText(make([]byte, 0, BlockBytes), key, BlockBytes)
	slot.Store(&cachedBlock{id: id, text: text})
	return text
}

// key maps an id to its text key. It is a bijection for a fixed salt, so distinct ids have
// distinct keys and hence distinct headers.
func (t *Texts) key(id int64) uint64 {
	return mix64(uint64(id) ^ t.salt)
}
