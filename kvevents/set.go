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

// Set is the blocks one engine holds now, by the router's keys. It keeps the
// engine's name of each block, which removals use. Not safe for concurrent
// use: its Subscriber serialises it.
type Set struct {
	seed      uint64
	blockSize int
	limit     int
	byEngine  map[EngineHash]uint64
	keys      map[uint64]EngineHash
	scratch   []uint64
	// removed logs the keys removed since TakeRemoved, and resets counts
	// Reset calls: what a subscriber stamps so that a reservation made
	// before an eviction is not believed after it.
	removed []uint64
	resets  uint64
}

// NewSet is an empty set for a model's blocks of blockSize tokens, holding at
// most limit blocks (at least one).
func NewSet(model string, blockSize, limit int) *Set {
	return &Set{seed: Seed(model), blockSize: blockSize, limit: max(limit, 1),
		byEngine: map[EngineHash]uint64{}, keys: map[uint64]EngineHash{}}
}

// Len is how many blocks the set holds.
func (s *Set) Len() int { return len(s.keys) }

// Reset forgets every block.
func (s *Set) Reset() {
	clear(s.byEngine)
	clear(s.keys)
	s.resets++
}

// TakeRemoved appends the keys removed since the last call to dst, and
// says how many times the set was reset in all.
func (s *Set) TakeRemoved(dst []uint64) ([]uint64, uint64) {
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
			s.remove(h)
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
	parent := s.seed
	if e.HasParent {
		key, ok := s.byEngine[e.Parent]
		if !ok {
			return ErrUnknownParent
		}
		parent = key
	}
	s.scratch = AppendKeys(s.scratch[:0], parent, e.Tokens, e.BlockSize)
	for i, key := range s.scratch {
		if _, held := s.byEngine[e.Hashes[i]]; !held && len(s.keys) >= s.limit {
			return ErrFull
		}
		s.remove(e.Hashes[i])
		s.byEngine[e.Hashes[i]] = key
		s.keys[key] = e.Hashes[i]
	}
	return nil
}

func (s *Set) remove(h EngineHash) {
	if key, ok := s.byEngine[h]; ok {
		delete(s.byEngine, h)
		if s.keys[key] == h {
			delete(s.keys, key)
			if len(s.removed) < s.limit {
				s.removed = append(s.removed, key)
			}
		}
	}
}

// Matched is how many leading blocks of a prompt, given by its keys, the
// engine holds now.
func (s *Set) Matched(keys []uint64) int {
	for i, k := range keys {
		if _, ok := s.keys[k]; !ok {
			return i
		}
	}
	return len(keys)
}

// Keys appends the keys of a prompt's full blocks of tokens, as this set
// keys them.
func (s *Set) Keys(dst []uint64, tokens []uint32) []uint64 {
	return AppendKeys(dst, s.seed, tokens, s.blockSize)
}
