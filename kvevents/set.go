package kvevents

import (
	"errors"
	"fmt"
)

// ErrUnknownParent says a Stored event continues a block this set never
// heard of (an event was lost): its blocks cannot be keyed and are left out.
var ErrUnknownParent = errors.New("kvevents: stored blocks follow an unknown block")

// ErrFull says the set reached its bound and refused blocks.
var ErrFull = errors.New("kvevents: block set full")

// ErrBlockSize says the engine's blocks are not the size the set keys by.
var ErrBlockSize = errors.New("kvevents: block size differs from the engine's")

// Set is the blocks one engine holds now, by the router's keys, and the
// engine's name of each (by fingerprint), which removals use. Both tables
// are bounded by the set's limit, in entries and so in bytes: at most about
// 15 bytes a block (fptable.go), whatever an engine sends.
//
// A set errs only towards holding less than the engine: a key or name
// fingerprint shared by two blocks (about 1 in 2^32 / limit) drops both
// rather than keep one the engine may have evicted. Not safe for concurrent
// use: its owner serialises it.
type Set struct {
	blockSize int
	limit     int
	keys      keySet
	engine    engineMap
	scratch   []Key
	// removed logs the keys removed since TakeRemoved (at most limit of
	// them), and resets counts Reset calls: what a subscriber stamps so
	// that a reservation made before an eviction is not believed after it.
	removed []Key
	resets  uint64
	// rec, when set, hears every change (Record).
	rec *[]Op
}

// NewSet is an empty set for an engine's blocks of blockSize tokens,
// holding at most limit blocks (at least one).
func NewSet(blockSize, limit int) *Set {
	return &Set{blockSize: blockSize, limit: max(limit, 1), keys: newKeySet(), engine: newEngineMap()}
}

// Len is how many blocks the set holds.
func (s *Set) Len() int { return s.keys.n }

// Names is how many engine names the set maps (at least Len, more when an
// engine names one block twice).
func (s *Set) Names() int { return s.engine.n }

// Bytes is the memory the set's tables hold.
func (s *Set) Bytes() int { return 4*len(s.keys.slots) + 8*len(s.engine.slots) + 4*cap(s.removed) }

// BlockSize is the engine's block size in tokens the set keys by.
func (s *Set) BlockSize() int { return s.blockSize }

// Reset forgets every block.
func (s *Set) Reset() {
	for _, e := range s.engine.slots {
		if e != 0 {
			s.logRemoved(Key(e))
		}
	}
	s.keys.reset()
	s.engine.reset()
	s.resets++
	s.record(OpReset, 0, 0)
}

// TakeRemoved appends the keys removed since the last call to dst, and
// says how many times the set was reset in all.
func (s *Set) TakeRemoved(dst []Key) ([]Key, uint64) {
	dst = append(dst, s.removed...)
	s.removed = s.removed[:0]
	return dst, s.resets
}

// Apply changes the set by one event. Blocks of another tier are ignored.
// An error says the set now lacks blocks the engine holds (never that it
// holds blocks the engine lacks).
func (s *Set) Apply(e Event) error {
	if !e.Tier {
		return nil
	}
	switch e.Kind {
	case Stored:
		return s.store(e)
	case Removed:
		for _, h := range e.Hashes {
			s.RemoveName(engineFP(h))
		}
	case Cleared:
		s.Reset()
	}
	return nil
}

func (s *Set) store(e Event) error {
	if e.BlockSize != s.blockSize {
		return fmt.Errorf("%w: %d, not %d", ErrBlockSize, e.BlockSize, s.blockSize)
	}
	parent := Seed(Identity(e.Identity, e.Salt))
	if e.HasParent {
		key, ok := s.engine.get(engineFP(e.Parent))
		if !ok {
			return ErrUnknownParent
		}
		parent = key
	}
	s.scratch = AppendKeys(s.scratch[:0], parent, e.Tokens, e.BlockSize)
	for i, key := range s.scratch {
		if err := s.StoreName(engineFP(e.Hashes[i]), key); err != nil {
			return err
		}
	}
	return nil
}

// StoreName records that the engine holds the block key under the name
// fingerprint fp: what a Stored event does per block, and what a peer's
// relay of it does (relay.go).
func (s *Set) StoreName(fp uint32, key Key) error {
	if !s.engine.has(fp) && s.engine.n >= s.limit {
		return ErrFull
	}
	s.record(OpStore, fp, key)
	old, ok := s.engine.put(fp, key, s.limit)
	if !ok {
		return ErrFull
	}
	if old != 0 && old != key {
		// Two blocks under one fingerprint: the earlier can no longer be
		// told apart, so it goes.
		s.dropKey(old)
	}
	if !s.keys.add(key, s.limit) {
		s.engine.take(fp)
		return ErrFull
	}
	return nil
}

// RemoveName forgets the block the engine named by fingerprint fp.
func (s *Set) RemoveName(fp uint32) {
	if key, ok := s.engine.take(fp); ok {
		s.record(OpRemove, fp, 0)
		s.dropKey(key)
	}
}

func (s *Set) dropKey(k Key) {
	if s.keys.remove(k) {
		s.logRemoved(k)
	}
}

func (s *Set) logRemoved(k Key) {
	if len(s.removed) < s.limit {
		s.removed = append(s.removed, k)
	}
}

// Has says whether the engine holds the block key.
func (s *Set) Has(k Key) bool { return s.keys.has(k) }

// Matched is how many leading blocks of a prompt, given by its keys, the
// engine holds now.
func (s *Set) Matched(keys []Key) int {
	for i, k := range keys {
		if !s.keys.has(k) {
			return i
		}
	}
	return len(keys)
}

// Keys appends the keys of a prompt's full blocks of tokens, for the cache
// identity identity (a model's prompts: "").
func (s *Set) Keys(dst []Key, identity string, tokens []uint32) []Key {
	return AppendKeys(dst, Seed(identity), tokens, s.blockSize)
}

// Content appends the set's names (fingerprint << 32 | key) and its keys:
// what restoring another set of the same limit from them gives the same
// set (Restore).
func (s *Set) Content(names []uint64, keys []Key) ([]uint64, []Key) {
	for _, e := range s.engine.slots {
		if e != 0 {
			names = append(names, e)
		}
	}
	for _, k := range s.keys.slots {
		if k != 0 {
			keys = append(keys, k)
		}
	}
	return names, keys
}

// Restore empties the set and fills it with a content (Content), within
// the set's limit: what does not fit is refused, as the stream would have,
// and a key no name maps to is left out (a set holds no block it could not
// hear the removal of).
func (s *Set) Restore(names []uint64, keys []Key) error {
	s.Reset()
	var err error
	for _, e := range names {
		if fp := entryFP(e); fp == 0 || Key(e) == 0 {
			continue
		} else if _, ok := s.engine.put(fp, Key(e), s.limit); !ok {
			err = ErrFull
		}
	}
	named := make(map[Key]struct{}, s.engine.n)
	s.engine.each(func(_ uint32, k Key) { named[k] = struct{}{} })
	for _, k := range keys {
		if _, ok := named[k]; !ok {
			continue
		}
		if !s.keys.add(k, s.limit) {
			err = ErrFull
		}
	}
	return err
}
