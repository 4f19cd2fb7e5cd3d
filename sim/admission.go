package sim

import (
	"slices"
	"sort"
	"time"
)

// peekWaiting returns the oldest live waiting sequence, dropping cancelled ones on the way.
func (e *Engine) peekWaiting() *sequence {
	for e.waitingHead < len(e.waiting) {
		s := e.waiting[e.waitingHead]
		if !s.cancelled {
			return s
		}
		e.popWaiting()
	}
	return nil
}

// pushWaiting queues s: last, or under priority scheduling before the first waiting sequence
// that s goes before.
func (e *Engine) pushWaiting(s *sequence) {
	e.waitingLen++
	countAdapter(e.lora.waiting, s.adapter, 1)
	if !e.cfg.PriorityScheduling {
		e.waiting = append(e.waiting, s)
		return
	}
	live := e.waiting[e.waitingHead:]
	i := e.waitingHead + sort.Search(len(live), func(i int) bool { return s.before(live[i]) })
	e.waiting = slices.Insert(e.waiting, i, s)
}

// takeWaiting removes the waiting entry at index i, the head or one a
// LoRA bound skipped before it.
func (e *Engine) takeWaiting(i int) {
	if i == e.waitingHead {
		e.popWaiting()
		return
	}
	e.waiting = slices.Delete(e.waiting, i, i+1)
}

func (e *Engine) popWaiting() {
	e.waiting[e.waitingHead] = nil
	e.waitingHead++
	if e.waitingHead > 64 && e.waitingHead*2 > len(e.waiting) {
		n := copy(e.waiting, e.waiting[e.waitingHead:])
		clear(e.waiting[n:])
		e.waiting = e.waiting[:n]
		e.waitingHead = 0
	}
}

// admit reserves the KV a sequence needs for its whole life (prompt and every token it will
// generate) and looks its prompt up in the prefix cache. It reports false, changing nothing,
// when the KV does not fit even after evicting every unreferenced block.
func (e *Engine) admit(s *sequence, at time.Duration) bool {
	p, private, ok := e.fits(s)
	if !ok {
		return false
	}
	s.private = private
	s.blocks = e.cache.commit(s.hashes, private)
	s.hashes = nil // nothing readmits it
	s.admitted = true
	hits := p.hits * e.cfg.BlockTokens
	s.kvTokens = hits
	s.cached = hits
	s.transfer = min(s.remote, s.promptTokens-hits)
	s.readyAt = at + e.cfg.TransferCost(s.transfer)
	s.prefillLeft = s.promptTokens - hits - s.transfer
	e.prefixQueries += uint64(s.promptTokens)
	e.prefixHits += uint64(hits)
	e.transferTokens += uint64(s.transfer)
	return true
}

// fits plans the admission of s: the blocks it would find indexed and those it needs of its
// own, and whether they fit, changing nothing.
func (e *Engine) fits(s *sequence) (plan admissionPlan, private int, ok bool) {
	p := e.cache.plan(s.hashes, e.cfg.hitLimitBlocks(s.promptTokens))
	private = e.cfg.BlocksFor(s.promptTokens+s.maxTokens) - p.indexed
	return p, private, e.cache.fits(p, private)
}

// release gives back everything a sequence holds in the cache.
func (e *Engine) release(s *sequence) {
	countAdapter(e.lora.running, s.adapter, -1)
	e.cache.release(s.blocks)
	s.blocks = nil
	e.cache.private -= s.private
	s.private = 0
}

// markComputed marks the sequence's indexed blocks whose tokens now have KV, so that later
// prompts can share them.
func (e *Engine) markComputed(s *sequence) {
	done := min(s.kvTokens/e.cfg.BlockTokens, len(s.blocks))
	for ; s.marked < done; s.marked++ {
		if e.cache.markComputed(s.blocks[s.marked]) && e.cfg.CacheEvents {
			e.logStored(s, s.marked)
		}
	}
}

func (e *Engine) removeRunning(s *sequence) {
	for i, r := range e.running {
		if r == s {
			e.running = slices.Delete(e.running, i, i+1)
			return
		}
	}
}
