package sim

// noSlot marks the end of the LRU list and an absent block.
const noSlot int32 = -1

// cacheBlock is one KV block known by its hash. A block is referenced while a running sequence
// uses it; an unreferenced computed block stays cached on the LRU list until evicted.
type cacheBlock struct {
	hash       uint64
	refs       int32
	computed   bool
	prev, next int32 // LRU neighbours while unreferenced, noSlot otherwise
}

// prefixCache is the engine's KV memory: capacity blocks, of which some are indexed by hash
// (shareable prompt blocks, referenced or cached) and some are private to a sequence (its partial
// last prompt block and the blocks reserved for generated tokens). Blocks live in a slab indexed
// by int32 to keep the garbage collector out of large simulations.
type prefixCache struct {
	capacity   int
	private    int // blocks held by sequences outside the index
	referenced int // indexed blocks with refs > 0
	slab       []cacheBlock
	freeSlots  []int32
	index      map[uint64]int32
	lruHead    int32 // most recently released
	lruTail    int32 // next to evict
	lruLen     int
	planned    []int32   // slots found by the last plan, noSlot for absent blocks
	log        *cacheLog // nil unless the engine logs cache events
}

func newPrefixCache(capacity int) prefixCache {
	return prefixCache{
		capacity: capacity,
		index:    make(map[uint64]int32),
		lruHead:  noSlot,
		lruTail:  noSlot,
	}
}

// admissionPlan is what admitting a prompt would take from the cache.
type admissionPlan struct {
	hits    int // leading blocks found computed, within the hit limit: the cached prefix
	indexed int // leading blocks the sequence will reference through the index
	lruHits int // of those, blocks now on the LRU list (no longer evictable once referenced)
	inserts int // of those, blocks absent from the index, to insert
}

// plan walks the prompt's block hashes. Found computed blocks are shared; absent ones will be
// inserted. A block present but not yet computed (another sequence is prefilling the same
// prefix) ends the shared part: from there on the sequence keeps private blocks, as a simple
// stand-in for vLLM computing the duplicate. The slots found are kept for commit, which must
// follow before the cache changes.
func (c *prefixCache) plan(hashes []uint64, hitLimit int) admissionPlan {
	var p admissionPlan
	c.planned = c.planned[:0]
	contiguous := true
	for i, h := range hashes {
		slot, ok := c.index[h]
		if !ok {
			contiguous = false
			p.inserts++
			c.planned = append(c.planned, noSlot)
			continue
		}
		b := &c.slab[slot]
		if !b.computed {
			break
		}
		if contiguous && i < hitLimit {
			p.hits++
		}
		if b.refs == 0 {
			p.lruHits++
		}
		c.planned = append(c.planned, slot)
	}
	p.indexed = len(c.planned)
	return p
}

// fits reports whether the plan plus extra private blocks fit after evicting unreferenced blocks.
func (c *prefixCache) fits(p admissionPlan, private int) bool {
	free := c.capacity - len(c.index) - c.private
	evictable := c.lruLen - p.lruHits
	return p.inserts+private <= free+evictable
}

// commit carries out the last plan for hashes: it claims private blocks and references the
// planned blocks, inserting absent ones, and returns their slots. Present blocks are referenced
// first, so that evicting room for the rest cannot evict a block this very prompt shares. The
// caller has checked fits.
func (c *prefixCache) commit(hashes []uint64, private int) []int32 {
	slots := make([]int32, len(c.planned))
	for i, slot := range c.planned {
		if slot != noSlot {
			c.ref(slot)
		}
		slots[i] = slot
	}
	c.private += private
	for c.capacity-len(c.index)-c.private < 0 {
		c.evict()
	}
	for i, slot := range slots {
		if slot == noSlot {
			slots[i] = c.insertOrRef(hashes[i])
		}
	}
	return slots
}

func (c *prefixCache) insertOrRef(h uint64) int32 {
	if slot, ok := c.index[h]; ok { // a colliding hash earlier in the same prompt
		c.ref(slot)
		return slot
	}
	if c.capacity-len(c.index)-c.private <= 0 {
		c.evict()
	}
	slot := c.allocSlot()
	c.slab[slot] = cacheBlock{hash: h, refs: 1, prev: noSlot, next: noSlot}
	c.index[h] = slot
	c.referenced++
	return slot
}

func (c *prefixCache) allocSlot() int32 {
	if n := len(c.freeSlots); n > 0 {
		slot := c.freeSlots[n-1]
		c.freeSlots = c.freeSlots[:n-1]
		return slot
	}
	c.slab = append(c.slab, cacheBlock{})
	return int32(len(c.slab) - 1)
}

func (c *prefixCache) ref(slot int32) {
	b := &c.slab[slot]
	if b.refs == 0 {
		c.unlink(slot)
		c.referenced++
	}
	b.refs++
}

// release drops one reference to each slot, last block first, so that a released prompt's tail
// is evicted before its head (a chain is useless without its head).
func (c *prefixCache) release(slots []int32) {
	for i := len(slots) - 1; i >= 0; i-- {
		slot := slots[i]
		b := &c.slab[slot]
		b.refs--
		if b.refs > 0 {
			continue
		}
		c.referenced--
		if b.computed {
			c.pushFront(slot)
		} else {
			c.remove(slot)
		}
	}
}

// markComputed reports whether the block was not computed before: it has just been stored.
func (c *prefixCache) markComputed(slot int32) bool {
	stored := !c.slab[slot].computed
	c.slab[slot].computed = true
	return stored
}

// evict drops the least recently released unreferenced block.
func (c *prefixCache) evict() {
	slot := c.lruTail
	c.unlink(slot)
	c.remove(slot)
}

func (c *prefixCache) remove(slot int32) {
	if c.log != nil && c.slab[slot].computed {
		c.log.removed(c.slab[slot].hash)
	}
	delete(c.index, c.slab[slot].hash)
	c.slab[slot] = cacheBlock{}
	c.freeSlots = append(c.freeSlots, slot)
}

func (c *prefixCache) pushFront(slot int32) {
	b := &c.slab[slot]
	b.prev, b.next = noSlot, c.lruHead
	if c.lruHead != noSlot {
		c.slab[c.lruHead].prev = slot
	} else {
		c.lruTail = slot
	}
	c.lruHead = slot
	c.lruLen++
}

func (c *prefixCache) unlink(slot int32) {
	b := &c.slab[slot]
	if b.prev != noSlot {
		c.slab[b.prev].next = b.next
	} else {
		c.lruHead = b.next
	}
	if b.next != noSlot {
		c.slab[b.next].prev = b.prev
	} else {
		c.lruTail = b.prev
	}
	b.prev, b.next = noSlot, noSlot
	c.lruLen--
}

// cachedPrefix counts the leading computed blocks of hashes, up to limit, without touching the
// cache.
func (c *prefixCache) cachedPrefix(hashes []uint64, limit int) int {
	n := 0
	for _, h := range hashes[:min(limit, len(hashes))] {
		slot, ok := c.index[h]
		if !ok || !c.slab[slot].computed {
			break
		}
		n++
	}
	return n
}

// usedBlocks is the number of blocks running sequences hold.
func (c *prefixCache) usedBlocks() int {
	return c.referenced + c.private
}
