package affinity

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

const indexShards = 64

// Index remembers which workers own which prefix blocks: "where requests were
// routed", the same approximation of the engines' caches that every prefix
// router keeps. A block may have several owners. Each owner's facts age out
// LRU within a per-worker budget in blocks, so the index forgets roughly when
// the engine does. A fact recorded by Insert is charged one block; a fact
// learned from a peer is charged the span of prefix it stands for, since
// peers send only a few facts per decision and the engine caches every block.
//
// Concurrency: Match takes only read locks of the shards it visits. Writers
// hold the owner's lock, then each shard's lock in turn, in that order.
type Index struct {
	clock         clock.PassiveClock
	defaultBudget int // blocks per worker
	// maxBudget is the largest budget any worker has had, in blocks.
	maxBudget atomic.Int64
	shards    [indexShards]indexShard
	owners    sync.Map // WorkerID -> *ownerLRU
	// gone holds the workers RemoveWorker removed, with when (unix
	// nanoseconds): their tables are dropped, and a late Insert or Learn
	// for one (a request routed before the removal, a peer's fact in
	// flight) records nothing. A tombstone is kept goneFor, then pruned,
	// so that a fleet whose workers come and go keeps no table nor
	// tombstone per worker it ever had.
	goneMu sync.Mutex
	gone   map[WorkerID]int64
}

// goneFor is how long a removed worker's tombstone is kept: far longer
// than a request or a peer's fact is in flight, and Raft applies the
// removal on every replica within it.
const goneFor = 10 * time.Minute

type indexShard struct {
	mu sync.RWMutex
	m  map[uint64][]*ownerNode
}

// ownerNode is one (block, worker) ownership fact, linked into its worker's
// LRU list.
type ownerNode struct {
	hash   uint64
	worker WorkerID
	// depth is the block's index in the chain Insert recorded it with.
	depth int32
	// stamp is the unix nanoseconds of the last use. It is written with
	// both the owner's and the shard's lock held, and read with either
	// (Expire, Depths): a plain field, where an atomic store per block of
	// every insert cost a locked instruction each.
	stamp int64
	// weight is how many blocks the fact is charged to its owner's
	// budget: 1 when recorded by Insert, the span when learned.
	weight int
	// inserted says the fact was recorded by Insert: the index holds every
	// block of its prefix, so it stands for itself alone.
	inserted bool
	// forks says a request recorded by Insert went on past this block: the
	// prefix it ends is shared by something longer (a system prompt, a
	// task prompt), not only the end of one conversation so far. Written
	// as stamp is, read under the shard's lock.
	forks      bool
	prev, next *ownerNode
	// parent is the fact of the block before this one in the chain Insert
	// recorded (nil at depth 0), itself recorded by Insert: what a peer's
	// fact for an inserted block refreshes or supersedes (Learn). A parent
	// evicted since is unlinked (prev nil). Written and read under the
	// owner's lock; drop clears it.
	parent *ownerNode
}

// ownerLRU is one worker's blocks, most recently used first.
type ownerLRU struct {
	mu      sync.Mutex
	head    ownerNode // sentinel: head.next is the newest, head.prev the oldest
	charged int       // the sum of the facts' weights, in blocks
	budget  int       // the most blocks charged after a trim: capacity x scale
	// capacity is the worker's budget as set (SetBudget, else the index's
	// default); scale, in [minScale, 1], is what the engines' answers say
	// of it (Calibrate).
	capacity int
	scale    float64
	removed  bool
	batch    *insertBatch // Insert's scratch, made on the first one
}

// Fact is one ownership fact: the block with this chained hash is held by
// worker, and so is the prefix it ends.
type Fact struct {
	Hash   uint64
	Worker WorkerID
	// Span is how many blocks of that prefix the fact stands for: the
	// blocks between it and the next shallower fact its sender announced
	// for the same decision, itself included. Learn charges it (at least
	// 1, at most the worker's budget) to the worker's budget.
	// SpanSuperseded marks a conversation's earlier deepest fact, now
	// inside the stretch of a deeper one.
	Span uint32
}

// SpanSuperseded is the span of a fact announced again because a deeper
// fact of the same conversation now stands for its stretch, back to the
// last checkpoint below it (LastCheckpointBelow): it stands for itself
// alone. A peer of an older build charges it 1, as it always did.
const SpanSuperseded = 0

// The checkpoints are the sparse blocks a replica announces for a routing
// decision besides its deepest: indexes 0, 1, 3, 7, ... (depths that are
// powers of two), each standing for the blocks back to the one before.
// A later turn of the same conversation announces the same ones, so their
// spans never change.

// IsCheckpoint reports whether block index i is a checkpoint.
func IsCheckpoint(i int) bool { return i >= 0 && (i+1)&i == 0 }

// LastCheckpointBelow is the deepest checkpoint index below i (-1 if none).
func LastCheckpointBelow(i int) int {
	c := -1
	for depth := 1; depth-1 < i; depth <<= 1 {
		c = depth - 1
	}
	return c
}

// NewIndex returns an empty index whose owners keep at most budgetBlocks
// blocks each unless SetBudget says otherwise. clk stamps the facts
// (clock.RealClock{} in the router, virtual time in the simulator and tests).
func NewIndex(clk clock.PassiveClock, budgetBlocks int) *Index {
	ix := &Index{clock: clk, defaultBudget: max(budgetBlocks, 1)}
	ix.maxBudget.Store(int64(ix.defaultBudget))
	for i := range ix.shards {
		ix.shards[i].m = make(map[uint64][]*ownerNode)
	}
	return ix
}

func (ix *Index) shard(h uint64) *indexShard { return &ix.shards[h%indexShards] }

func (ix *Index) owner(w WorkerID) *ownerLRU {
	if o, ok := ix.owners.Load(w); ok {
		return o.(*ownerLRU)
	}
	o := &ownerLRU{budget: ix.defaultBudget, capacity: ix.defaultBudget, scale: 1}
	o.head.next, o.head.prev = &o.head, &o.head
	ix.goneMu.Lock()
	defer ix.goneMu.Unlock()
	if _, gone := ix.gone[w]; gone {
		// A removed worker's table is not made again: this one is
		// nobody's, and records nothing.
		o.removed = true
		return o
	}
	actual, _ := ix.owners.LoadOrStore(w, o)
	return actual.(*ownerLRU)
}

// Insert records that worker w holds every block of hashes, charging each
// block once (a block recorded before as a learned fact is now charged as
// itself alone: its shallower blocks are recorded too). The shallowest
// blocks become the most recently used, so eviction takes deep blocks first
// and what stays is a prefix.
func (ix *Index) Insert(hashes []uint64, w WorkerID) {
	o := ix.owner(w)
	now := ix.clock.Now().UnixNano()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.removed {
		return
	}
	if o.batch == nil {
		o.batch = new(insertBatch)
	}
	// Deepest chunk first, each deepest block first: the shallowest block
	// of all is pushed to the front of the LRU last.
	var deeper *ownerNode // the first fact of the chunk recorded before
	for end := len(hashes); end > 0; end -= insertChunk {
		start := max(end-insertChunk, 0)
		nodes := ix.record(o.batch, hashes[start:end], w, now, end < len(hashes))
		if deeper != nil {
			deeper.parent = nodes[len(nodes)-1]
		}
		deeper = nodes[0]
		for i := len(nodes) - 1; i >= 0; i-- {
			n := nodes[i]
			n.depth, n.parent = int32(start+i), nil
			if i > 0 {
				n.parent = nodes[i-1]
			}
			o.moveToFront(n)
			o.reweigh(n, 1)
			nodes[i] = nil // the scratch holds no fact past the insert
		}
	}
	ix.trim(o)
}

// insertChunk is how many blocks Insert records under one round of shard
// locks; a longer prompt is recorded chunk by chunk.
const insertChunk = 256

// insertBatch is one owner's scratch for Insert, guarded by its lock: the
// chunk's facts in the order of its hashes, and the hashes' positions
// sorted by shard. It takes 2.5 KiB per worker ever routed to, and spares
// every Insert an allocation.
type insertBatch struct {
	nodes [insertChunk]*ownerNode
	order [insertChunk]uint16
}

// record finds or adds the fact (h, w) of each of hashes (at most
// insertChunk), stamped now and marked inserted and, but for the very
// last block of the request (deeper: more blocks follow the chunk), as
// forking, and returns them in the order of hashes. It takes each shard's
// lock once, not once per block: a 64 KiB prompt is 256 blocks on 64
// shards. The facts are not linked into o's LRU: new ones not at all,
// known ones where they were. o.mu is held.
func (ix *Index) record(b *insertBatch, hashes []uint64, w WorkerID, now int64, deeper bool) []*ownerNode {
	bounds := b.sortByShard(hashes)
	nodes := b.nodes[:len(hashes)]
	for s := range indexShards {
		if at := b.order[bounds[s]:bounds[s+1]]; len(at) > 0 {
			ix.shards[s].record(hashes, at, nodes, w, now, deeper)
		}
	}
	return nodes
}

// sortByShard puts the positions of hashes (at most insertChunk) into
// b.order sorted by their shard, a counting sort, and returns where each
// shard's positions start: shard s's are b.order[bounds[s]:bounds[s+1]].
func (b *insertBatch) sortByShard(hashes []uint64) (bounds [indexShards + 1]uint16) {
	for _, h := range hashes {
		bounds[h%indexShards+1]++
	}
	for s := range indexShards {
		bounds[s+1] += bounds[s]
	}
	next := bounds
	for i, h := range hashes {
		s := h % indexShards
		b.order[next[s]] = uint16(i)
		next[s]++
	}
	return bounds
}

// record is Index.record for the positions of hashes that fall in s.
func (s *indexShard) record(hashes []uint64, positions []uint16, nodes []*ownerNode, w WorkerID, now int64, deeper bool) {
	last := len(hashes) - 1
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range positions {
		n := s.find(hashes[i], w)
		n.stamp, n.inserted = now, true
		if i < uint16(last) || deeper {
			n.forks = true
		}
		nodes[i] = n
	}
}

// find returns the fact (h, w), adding it, unlinked, when it is new. The
// shard's lock is held.
func (s *indexShard) find(h uint64, w WorkerID) *ownerNode {
	for _, n := range s.m[h] {
		if n.worker == w {
			return n
		}
	}
	n := &ownerNode{hash: h, worker: w}
	s.m[h] = append(s.m[h], n)
	return n
}

// Learn records one ownership fact heard from another replica and charges
// its span, at least 1, to the worker's budget. A fact already held takes the
// new charge: the same fact announced by two replicas is charged once, and a
// fact announced again with a smaller span (a deeper fact of the same
// conversation now stands for its stretch) is charged less. A fact recorded
// by Insert keeps its charge of 1. The charge is capped at the budget: a
// fact heavier than the whole budget would otherwise evict itself, whereas
// the engine, having just served that prefix, holds what fits of it.
func (ix *Index) Learn(f Fact) {
	o := ix.owner(f.Worker)
	now := ix.clock.Now().UnixNano()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.removed {
		return
	}
	node := ix.touch(o, f.Hash, f.Worker, now)
	o.reweigh(node, ix.learnedCharge(o, node, f, now))
	ix.trim(o)
}

// learnedCharge is what f charges its fact, node, just made the newest.
// A learned fact is charged its span. A fact this replica recorded by
// Insert keeps the blocks before it as facts of their own, each charged 1,
// and the peer's decision used them too: the ones within f's span are
// made the newest with it, as Insert would have (a checkpoint's blocks
// otherwise aged out apart from it while the engine kept them, and the
// index, charging the checkpoint 1, went on believing in what the engine
// had evicted: 4-5x one replica's false hits in a tier of 4 or 8), and
// those of them it no longer holds are charged to node. A superseded fact
// stands for itself alone, and the blocks recorded between it and the
// last checkpoint below it are dropped: the deeper fact that superseded
// it is charged for them. o.mu is held.
func (ix *Index) learnedCharge(o *ownerLRU, node *ownerNode, f Fact, now int64) int {
	switch {
	case !node.inserted:
		return min(max(int(f.Span), 1), o.budget)
	case f.Span == SpanSuperseded:
		ix.dropStretch(o, node)
		return 1
	}
	return 1 + ix.refreshAncestors(o, node, int(min(f.Span, MaxChainBlocks))-1, now)
}

// refreshAncestors makes up to n recorded blocks before node, in chain
// order back from it, the newest facts of o, the shallowest newest, and
// returns how many of the n it no longer holds. o.mu is held.
func (ix *Index) refreshAncestors(o *ownerLRU, node *ownerNode, n int, now int64) (missing int) {
	p := node.parent
	for n > 0 {
		chunk := o.batch.nodes[:0]
		for ; n > 0 && len(chunk) < insertChunk; n-- {
			if p == nil || p.prev == nil { // the chain ends, or its fact was evicted
				ix.restamp(o.batch, chunk, now)
				return n
			}
			o.moveToFront(p)
			chunk = append(chunk, p)
			p = p.parent
		}
		ix.restamp(o.batch, chunk, now)
	}
	return 0
}

// restamp stamps nodes now, taking each shard's lock once, and clears the
// scratch they are in. o.mu is held.
func (ix *Index) restamp(b *insertBatch, nodes []*ownerNode, now int64) {
	var hashes [insertChunk]uint64
	for i, n := range nodes {
		hashes[i] = n.hash
	}
	bounds := b.sortByShard(hashes[:len(nodes)])
	for s := range indexShards {
		if at := b.order[bounds[s]:bounds[s+1]]; len(at) > 0 {
			sh := &ix.shards[s]
			sh.mu.Lock()
			for _, i := range at {
				nodes[i].stamp = now
			}
			sh.mu.Unlock()
		}
	}
	clear(nodes)
}

// dropStretch drops the recorded blocks between node and the last
// checkpoint below it. o.mu is held.
func (ix *Index) dropStretch(o *ownerLRU, node *ownerNode) {
	c := LastCheckpointBelow(int(node.depth))
	for p := node.parent; p != nil && p.prev != nil && int(p.depth) > c; {
		next := p.parent
		ix.drop(o, p)
		p = next
	}
	node.parent = nil
}

// touch makes (h, w) the newest fact of o and returns it, adding it with
// weight 0 when new: the caller weighs it before trimming. o.mu is held.
func (ix *Index) touch(o *ownerLRU, h uint64, w WorkerID, now int64) *ownerNode {
	s := ix.shard(h)
	s.mu.Lock()
	node := s.find(h, w)
	node.stamp = now
	s.mu.Unlock()
	o.moveToFront(node)
	return node
}

// moveToFront makes n, one of o's facts, its newest, linking it if it was
// not linked yet (a new fact). o.mu is held.
func (o *ownerLRU) moveToFront(n *ownerNode) {
	if n.prev != nil {
		n.unlink()
	}
	o.pushFront(n)
}

// reweigh sets the weight of n, one of o's facts. o.mu is held.
func (o *ownerLRU) reweigh(n *ownerNode, weight int) {
	o.charged += weight - n.weight
	n.weight = weight
}

// trim evicts o's oldest facts until the blocks charged fit its budget. A
// fact charged for more blocks than the excess, one standing for a stretch
// of prefix, loses only the excess: the engine's cache gives up a prefix's
// deepest blocks first, one at a time, and a tier's replica dropping a
// peer's fact of 40 blocks whole when one was over evicted conversations
// the engine still held (fleetsim, 8 replicas at 0.3 s: 5.0 such lost hits
// a run against 1.1). o.mu is held.
func (ix *Index) trim(o *ownerLRU) {
	for o.charged > o.budget && !o.empty() {
		if tail, over := o.head.prev, o.charged-o.budget; tail.weight > over {
			o.reweigh(tail, tail.weight-over)
			return
		}
		ix.drop(o, o.head.prev)
	}
}

// drop removes node from o and from its shard. o.mu is held.
func (ix *Index) drop(o *ownerLRU, node *ownerNode) {
	node.unlink()
	node.parent = nil
	o.charged -= node.weight
	s := ix.shard(node.hash)
	s.mu.Lock()
	nodes := s.m[node.hash]
	for i, n := range nodes {
		if n == node {
			nodes[i] = nodes[len(nodes)-1]
			nodes = nodes[:len(nodes)-1]
			break
		}
	}
	if len(nodes) == 0 {
		delete(s.m, node.hash)
	} else {
		s.m[node.hash] = nodes
	}
	s.mu.Unlock()
}

func (n *ownerNode) unlink() {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (o *ownerLRU) empty() bool { return o.head.next == &o.head }

func (o *ownerLRU) pushFront(n *ownerNode) {
	n.prev, n.next = &o.head, o.head.next
	o.head.next.prev = n
	o.head.next = n
}

// Match finds the deepest block of hashes that has an owner in pool and
// returns its depth (-1 when none) and the owners there that are candidates,
// appended to dst. It scans from the deepest block down, so a continuation of
// a known conversation costs a lookup per new block, and sparse facts learned
// from peers (not every block) still match.
func (ix *Index) Match(hashes []uint64, pool *Pool, dst []WorkerID) (int, []WorkerID) {
	for d := len(hashes) - 1; d >= 0; d-- {
		s := ix.shard(hashes[d])
		s.mu.RLock()
		for _, n := range s.m[hashes[d]] {
			if pool.Contains(n.worker) {
				dst = append(dst, n.worker)
			}
		}
		s.mu.RUnlock()
		if len(dst) > 0 {
			return d, dst
		}
	}
	return -1, dst
}

// Forks reports whether a request went on past the block h, at index
// depth of a chain: one recorded here on some worker, or a peer's whose
// checkpoint h is (depth a checkpoint's, and a fact learned from a peer
// rather than recorded here): a peer announces a decision's checkpoints
// below its deepest block, so one matched as the deepest known block was
// the start of something longer, a system prompt the peer's session went
// on past. A request that matches it there shares it rather than
// continuing the one conversation that ended there. (A peer's request that
// ended on a checkpoint's depth is taken for a fork too: it costs its next
// turn a question to the placer, where it is known.)
func (ix *Index) Forks(h uint64, depth int) bool {
	checkpoint := IsCheckpoint(depth)
	s := ix.shard(h)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.m[h] {
		if n.forks || (checkpoint && !n.inserted) {
			return true
		}
	}
	return false
}

// Recorded reports whether a request recorded here by Insert, on some
// worker, holds the block h: unlike a peer's fact, one whose every block
// before it is known here.
func (ix *Index) Recorded(h uint64) bool {
	s := ix.shard(h)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.m[h] {
		if n.inserted {
			return true
		}
	}
	return false
}

// SetBudget sets how many blocks may be charged to worker w (its engine's KV
// capacity, when known). Facts over the new budget are evicted at once.
func (ix *Index) SetBudget(w WorkerID, blocks int) {
	o := ix.owner(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.removed {
		return
	}
	o.capacity = max(blocks, 1)
	for seen := ix.maxBudget.Load(); int64(o.capacity) > seen && !ix.maxBudget.CompareAndSwap(seen, int64(o.capacity)); {
		seen = ix.maxBudget.Load()
	}
	o.rescale()
	ix.trim(o)
}

// The calibration of a worker's budget by its engine's answers: the index
// charges a worker about what its engine caches, but not exactly (a peer's
// fact charges a span, generated tokens are not charged, the engine's
// eviction order is its own), and where it charges too little it goes on
// believing in prefixes the engine has evicted. A hit the engine did not
// back shrinks the budget by calibrationDecrease (the index forgets the
// least recently used facts at once: the likeliest to be gone); a hit it
// backed grows it back by calibrationIncrease of the capacity, never above
// the capacity nor below minScale of it.
const (
	calibrationDecrease = 0.95
	calibrationIncrease = 0.01
	minScale            = 0.1
)

// Calibrate tells the index whether w's engine held a prefix the index
// predicted as a hit (see above).
func (ix *Index) Calibrate(w WorkerID, held bool) {
	o := ix.owner(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	if held {
		o.scale = min(1, o.scale+calibrationIncrease)
	} else {
		o.scale = max(minScale, o.scale*calibrationDecrease)
	}
	o.rescale()
	ix.trim(o)
}

// Scale is w's budget as a share of its capacity, 1 until Calibrate
// shrinks it.
func (ix *Index) Scale(w WorkerID) float64 {
	o := ix.owner(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.scale
}

// rescale sets the budget from the capacity and the scale. o.mu is held.
func (o *ownerLRU) rescale() { o.budget = max(int(float64(o.capacity)*o.scale), 1) }

// MaxBudget is the largest budget any worker has had, in blocks: hashing a
// request further than that is wasted, since no engine holds more of it.
func (ix *Index) MaxBudget() int { return int(ix.maxBudget.Load()) }

// Forget drops every block of w: its engine is gone or restarted, so what it
// held is lost. New blocks may be recorded for w afterwards.
func (ix *Index) Forget(w WorkerID) {
	o := ix.owner(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	for !o.empty() {
		ix.drop(o, o.head.prev)
	}
}

// RemoveWorker forgets every block of w, for good: w's id is never reused.
// Its table is dropped, not kept empty: a fleet whose workers come and go
// would otherwise hold one table (and its 2.5 KiB insert scratch) per
// worker it ever had.
func (ix *Index) RemoveWorker(w WorkerID) {
	now := ix.clock.Now().UnixNano()
	ix.goneMu.Lock()
	if ix.gone == nil {
		ix.gone = make(map[WorkerID]int64)
	}
	ix.gone[w] = now
	for id, at := range ix.gone {
		if now-at > int64(goneFor) {
			delete(ix.gone, id)
		}
	}
	ix.goneMu.Unlock()
	// owner() makes no table for w from here on; the one it had, if any,
	// is marked removed (an Insert holding it records nothing), emptied
	// and dropped.
	v, ok := ix.owners.Load(w)
	if !ok {
		return
	}
	o := v.(*ownerLRU)
	o.mu.Lock()
	o.removed = true
	for !o.empty() {
		ix.drop(o, o.head.prev)
	}
	o.batch = nil
	o.mu.Unlock()
	ix.owners.Delete(w)
}

// Gone returns how many removed workers' tombstones the index keeps (those
// removed in the last goneFor).
func (ix *Index) Gone() int {
	ix.goneMu.Lock()
	defer ix.goneMu.Unlock()
	return len(ix.gone)
}

// TotalBlocks returns the blocks charged to every worker's budget, summed.
func (ix *Index) TotalBlocks() int {
	n := 0
	ix.owners.Range(func(_, v any) bool {
		o := v.(*ownerLRU)
		o.mu.Lock()
		n += o.charged
		o.mu.Unlock()
		return true
	})
	return n
}

// Expire drops every fact not used since before cutoff. The router calls it
// every --eviction-interval when --prefix-ttl is set.
func (ix *Index) Expire(cutoff time.Time) {
	c := cutoff.UnixNano()
	ix.owners.Range(func(_, v any) bool {
		o := v.(*ownerLRU)
		o.mu.Lock()
		for !o.empty() && o.head.prev.stamp < c {
			ix.drop(o, o.head.prev)
		}
		o.mu.Unlock()
		return true
	})
}

// Blocks returns how many blocks are charged to worker w's budget: one per
// block recorded by Insert, plus each learned fact's charge.
func (ix *Index) Blocks(w WorkerID) int {
	o := ix.owner(w)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.charged
}

// Workers returns how many workers the index keeps a table for (removed
// ones are dropped).
func (ix *Index) Workers() int {
	n := 0
	ix.owners.Range(func(_, _ any) bool { n++; return true })
	return n
}

// Recent returns up to perWorker of each worker's most recently used facts,
// newest first, each with its charge as its Span: the full state a joining
// replica receives.
func (ix *Index) Recent(perWorker int) []Fact {
	var out []Fact
	ix.owners.Range(func(k, v any) bool {
		o := v.(*ownerLRU)
		o.mu.Lock()
		for n, i := o.head.next, 0; n != &o.head && i < perWorker; n, i = n.next, i+1 {
			out = append(out, Fact{Hash: n.hash, Worker: n.worker, Span: uint32(n.weight)})
		}
		o.mu.Unlock()
		return true
	})
	return out
}

// Inserted reports whether worker w is recorded for block h (held) and, if
// so, whether by Insert (this replica's own decision) rather than learned
// from a peer: what attribution says a decision knew.
func (ix *Index) Inserted(h uint64, w WorkerID) (inserted, held bool) {
	o, ok := ix.owners.Load(w)
	if !ok {
		return false, false
	}
	lru := o.(*ownerLRU)
	lru.mu.Lock() // inserted is written under the owner's lock
	defer lru.mu.Unlock()
	s := ix.shard(h)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.m[h] {
		if n.worker == w {
			return n.inserted, true
		}
	}
	return false, false
}

// Continues is the worker of pool that an earlier prompt hashes continue
// was sent to: the owner (the lowest id, where several are) of the deepest
// block of hashes the index knows, when hashes go on past it and no request
// this replica recorded did (a prefix that others went on past, a shared
// system prompt, is no earlier turn of this conversation).
func (ix *Index) Continues(hashes []uint64, pool *Pool) (WorkerID, bool) {
	var buf [8]WorkerID
	depth, owners := ix.Match(hashes, pool, buf[:0])
	if depth < 0 || depth+1 >= len(hashes) || len(owners) == 0 || ix.Forks(hashes[depth], depth) {
		return 0, false
	}
	return slices.Min(owners), true
}
