package sim

import (
	"slices"
	"sort"
	"time"
)

// waitQueue is the requests not admitted yet: in arrival order, or by priority under priority
// scheduling; cancelled entries are skipped lazily.
type waitQueue struct {
	entries    []*sequence
	head       int
	live       int  // live entries
	byPriority bool // Config.PriorityScheduling
}

// peek returns the oldest live waiting sequence, dropping cancelled ones on the way.
func (q *waitQueue) peek() *sequence {
	for q.head < len(q.entries) {
		s := q.entries[q.head]
		if !s.cancelled {
			return s
		}
		q.pop()
	}
	return nil
}

// push queues s: last, or under priority scheduling before the first waiting sequence
// that s goes before.
func (q *waitQueue) push(s *sequence) {
	q.live++
	if !q.byPriority {
		q.entries = append(q.entries, s)
		return
	}
	live := q.entries[q.head:]
	i := q.head + sort.Search(len(live), func(i int) bool { return s.before(live[i]) })
	q.entries = slices.Insert(q.entries, i, s)
}

// take removes the live waiting entry at index i, the head or one a
// LoRA bound skipped before it, as it is admitted.
func (q *waitQueue) take(i int) {
	q.live--
	if i == q.head {
		q.pop()
		return
	}
	q.entries = slices.Delete(q.entries, i, i+1)
}

// cancelled counts out a waiting entry just cancelled; the entry itself leaves when it reaches
// the head.
func (q *waitQueue) cancelled() { q.live-- }

func (q *waitQueue) pop() {
	q.entries[q.head] = nil
	q.head++
	if q.head > 64 && q.head*2 > len(q.entries) {
		n := copy(q.entries, q.entries[q.head:])
		clear(q.entries[n:])
		q.entries = q.entries[:n]
		q.head = 0
	}
}

// nextAdmissible is the first live waiting sequence at or after index *i that the LoRA bound
// (max adapters in a batch) lets into the batch, *i set to its index; nil when there is none.
// Cancelled entries at the head are dropped on the way.
func (q *waitQueue) nextAdmissible(i *int, lora *loraSlots, max int) *sequence {
	for ; *i < len(q.entries); *i++ {
		s := q.entries[*i]
		if s.cancelled && *i == q.head {
			q.pop()
			*i = q.head - 1 // the loop's increment brings it to the new head
			continue
		}
		if !s.cancelled && lora.allows(s.adapter, max) {
			return s
		}
	}
	return nil
}

// kvManager is the engine's KV cache as its sequences use it, after vLLM's KVCacheManager: it
// reserves a sequence's blocks at admission, looking its prompt up in the prefix cache, marks the
// blocks it computes shareable (logging them when cache events are on), and releases them. It
// counts the lookups.
type kvManager struct {
	cfg            *Config // the engine's
	cache          prefixCache
	log            cacheLog
	prefixQueries  uint64
	prefixHits     uint64
	transferTokens uint64
}

// admit reserves the KV a sequence needs for its whole life (prompt and every token it will
// generate) and looks its prompt up in the prefix cache. It reports false, changing nothing,
// when the KV does not fit even after evicting every unreferenced block.
func (m *kvManager) admit(s *sequence, at time.Duration) bool {
	p, private, ok := m.fits(s)
	if !ok {
		return false
	}
	s.private = private
	s.blocks = m.cache.commit(s.hashes, private)
	s.hashes = nil // nothing readmits it
	s.admitted = true
	hits := p.hits * m.cfg.BlockTokens
	s.kvTokens = hits
	s.cached = hits
	s.transfer = min(s.remote, s.promptTokens-hits)
	s.readyAt = at + m.cfg.TransferCost(s.transfer)
	s.prefillLeft = s.promptTokens - hits - s.transfer
	m.prefixQueries += uint64(s.promptTokens)
	m.prefixHits += uint64(hits)
	m.transferTokens += uint64(s.transfer)
	return true
}

// fits plans the admission of s: the blocks it would find indexed and those it needs of its
// own, and whether they fit, changing nothing.
func (m *kvManager) fits(s *sequence) (plan admissionPlan, private int, ok bool) {
	p := m.cache.plan(s.hashes, m.cfg.hitLimitBlocks(s.promptTokens))
	private = m.cfg.BlocksFor(s.promptTokens+s.maxTokens) - p.indexed
	return p, private, m.cache.fits(p, private)
}

// release gives back everything a sequence holds in the cache. A sequence whose output is known
// leaves the blocks of its output cached too, in place of the private blocks that held them.
func (m *kvManager) release(s *sequence) {
	m.cache.private -= s.private
	s.private = 0
	m.cacheOutput(s)
	m.cache.release(s.blocks)
	s.blocks = nil
}

// cacheOutput appends to s's blocks the full blocks of its prompt followed by the output it has
// KV for (every generated token but the last, which no step has fed yet), computed, as vLLM
// caches decode blocks. The output hangs from the prompt's last block, so nothing is cached
// unless the whole prompt is (a duplicate prefix kept private ends the chain), nor past a block
// another sequence is still computing.
func (m *kvManager) cacheOutput(s *sequence) {
	if s.output == nil || s.generated < 2 || len(s.blocks) != s.promptBlocks || s.marked < len(s.blocks) {
		return
	}
	text := s.output(s.tail, s.generated-1)
	parent, hasParent := identitySeed(s.adapter, s.salt), len(s.blocks) > 0
	if hasParent {
		parent = m.cache.slab[s.blocks[len(s.blocks)-1]].hash
	}
	var tokens []uint32
	if m.cfg.CacheEvents {
		tokens = m.cfg.Tokens(nil, text)
	}
	bt := m.cfg.BlockTokens
	for i, h := range m.cfg.appendBlockHashesFrom(nil, parent, text) {
		slot, ok := m.cache.index[h]
		switch {
		case ok && !m.cache.slab[slot].computed:
			return
		case ok:
			m.cache.ref(slot)
		default:
			slot = m.cache.insertOrRef(h)
			m.cache.markComputed(slot)
			if m.cfg.CacheEvents {
				m.log.stored(h, parent, hasParent, tokens[i*bt:(i+1)*bt], s.adapter, s.salt)
			}
		}
		s.blocks = append(s.blocks, slot)
		parent, hasParent = h, true
	}
}

// markComputed marks the sequence's indexed blocks whose tokens now have KV, so that later
// prompts can share them.
func (m *kvManager) markComputed(s *sequence) {
	done := min(s.kvTokens/m.cfg.BlockTokens, len(s.blocks))
	for ; s.marked < done; s.marked++ {
		if m.cache.markComputed(s.blocks[s.marked]) && m.cfg.CacheEvents {
			m.logStored(s, s.marked)
		}
	}
}

// cachedTokens is the number of tokens of prompt that would be found cached if it were admitted
// now. It changes nothing.
func (m *kvManager) cachedTokens(prompt []byte) int {
	hashes := m.cfg.AppendBlockHashes(nil, prompt)
	limit := m.cfg.hitLimitBlocks(m.cfg.TokenCount(len(prompt)))
	return m.cache.cachedPrefix(hashes, limit) * m.cfg.BlockTokens
}

// runningSet is the admitted, unfinished sequences, in admission order.
type runningSet struct{ seqs []*sequence }

func (r *runningSet) add(s *sequence) { r.seqs = append(r.seqs, s) }

func (r *runningSet) remove(s *sequence) {
	for i, o := range r.seqs {
		if o == s {
			r.seqs = slices.Delete(r.seqs, i, i+1)
			return
		}
	}
}

func (r *runningSet) dropFinished() {
	kept := r.seqs[:0]
	for _, s := range r.seqs {
		if !s.finished {
			kept = append(kept, s)
		}
	}
	clear(r.seqs[len(kept):])
	r.seqs = kept
}

// earliestReady is the earliest instant a running sequence is ready to compute (its KV
// transfer, if any, complete), and false when nothing runs.
func (r *runningSet) earliestReady() (at time.Duration, ok bool) {
	for _, s := range r.seqs {
		if !ok || s.readyAt < at {
			ok, at = true, s.readyAt
		}
	}
	return at, ok
}
