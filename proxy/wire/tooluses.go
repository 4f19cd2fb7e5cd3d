package wire

import (
	"bytes"
	"slices"

	"github.com/zeebo/xxh3"
)

// toolUses are the tool_use ids of the Anthropic message being read and of
// the one before it, whose tool_results must each name one of them
// (Anthropic's rule). A few are looked up one by one; past linearUses, a
// sorted index of their digests is built at the first lookup, so that a
// body of thousands of calls and as many results costs n log n, not n².
// The ids are the body's bytes, still escaped.
type toolUses struct {
	before, now [][]byte
	index       []uint64 // the digests of before, sorted, once indexed
	indexed     bool
}

// linearUses is how many ids are looked up one by one.
const linearUses = 16

// turn starts a message: the ids of the message that was read become those
// its tool_results may answer.
func (u *toolUses) turn() {
	u.before, u.now, u.indexed = u.now, u.before[:0], false
}

// add records the id of a tool_use of the message being read.
func (u *toolUses) add(id []byte) { u.now = append(u.now, id) }

// answers reports whether id, a tool_result's tool_use_id, names a
// tool_use of the message before. Through the index, two ids are the same
// when their digests are: a false match (at odds of about n in 2^64) only
// lets the engine judge the request.
func (u *toolUses) answers(id []byte) bool {
	if len(u.before) <= linearUses {
		return slices.ContainsFunc(u.before, func(use []byte) bool { return sameID(use, id) })
	}
	if !u.indexed {
		u.index = u.index[:0]
		for _, use := range u.before {
			u.index = append(u.index, idDigest(use))
		}
		slices.Sort(u.index)
		u.indexed = true
	}
	_, found := slices.BinarySearch(u.index, idDigest(id))
	return found
}

// reset empties u for the pool; nothing kept names a body.
func (u *toolUses) reset() {
	clear(u.before)
	clear(u.now)
	u.before, u.now, u.index, u.indexed = u.before[:0], u.now[:0], u.index[:0], false
}

// sameID reports whether two raw ids are the same, escapes read.
func sameID(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	return (hasBackslash(a) || hasBackslash(b)) && bytes.Equal(jsonAppendUnescaped(nil, a), jsonAppendUnescaped(nil, b))
}

// idDigest is the digest of a raw id, escapes read.
func idDigest(id []byte) uint64 {
	if hasBackslash(id) {
		return xxh3.Hash(jsonAppendUnescaped(nil, id))
	}
	return xxh3.Hash(id)
}
