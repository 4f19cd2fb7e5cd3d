package sim

// CacheEvent is one change of an engine's prefix cache, as vLLM publishes it: blocks computed
// and now shared (Stored), or evicted (Removed). Blocks are named by the engine's own chained
// hashes; a Stored event carries the blocks' token IDs, [Config.BlockTokens] per block.
type CacheEvent struct {
	Removed bool
	Hashes  []uint64
	// Parent is the hash of the block the first stored block follows; HasParent is false when
	// the first block starts its prompt.
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	// Adapter is the LoRA adapter the stored blocks were computed with, ""
	// for the base model; Salt the prompt's cache_salt, on a Stored event
	// that starts its prompt (the salt enters the first block's hash).
	Adapter, Salt string
}

// cacheLog is the engine's events since they were last taken, in the order they happened.
type cacheLog struct{ events []CacheEvent }

// stored logs block i of a prompt, extending the last Stored event when block i follows its
// last block.
func (l *cacheLog) stored(hash uint64, parent uint64, hasParent bool, tokens []uint32, adapter, salt string) {
	if n := len(l.events); n > 0 {
		last := &l.events[n-1]
		if !last.Removed && hasParent && last.Hashes[len(last.Hashes)-1] == parent {
			last.Hashes = append(last.Hashes, hash)
			last.Tokens = append(last.Tokens, tokens...)
			return
		}
	}
	if hasParent {
		salt = ""
	}
	l.events = append(l.events, CacheEvent{Hashes: []uint64{hash}, Parent: parent, HasParent: hasParent,
		Tokens: append([]uint32(nil), tokens...), Adapter: adapter, Salt: salt})
}

func (l *cacheLog) removed(hash uint64) {
	if n := len(l.events); n > 0 && l.events[n-1].Removed {
		l.events[n-1].Hashes = append(l.events[n-1].Hashes, hash)
		return
	}
	l.events = append(l.events, CacheEvent{Removed: true, Hashes: []uint64{hash}})
}

// logStored logs block i of s, just computed.
func (m *kvManager) logStored(s *sequence, i int) {
	bt := m.cfg.BlockTokens
	var parent uint64
	if i > 0 {
		parent = m.cache.slab[s.blocks[i-1]].hash
	}
	m.log.stored(m.cache.slab[s.blocks[i]].hash, parent, i > 0, s.tokens[i*bt:(i+1)*bt], s.adapter, s.salt)
}

// TakeCacheEvents appends the cache events logged since the last call to dst and forgets them.
// Nothing is logged unless [Config.CacheEvents] is set.
func (e *Engine) TakeCacheEvents(dst []CacheEvent) []CacheEvent {
	dst = append(dst, e.kv.log.events...)
	clear(e.kv.log.events)
	e.kv.log.events = e.kv.log.events[:0]
	return dst
}
