package affinity

import (
	"math"
	"slices"
)

// CacheAware sends a request to the worker that owns its longest known
// prefix, unless that worker is itself overloaded compared with the least
// loaded candidate; misses are placed by least load or by rendezvous hashing.
//
// With fleetGate set it is instead the old baseline that judged imbalance
// over the whole fleet and then dropped affinity for every request; it is
// kept only so benchmarks can show the difference.
type CacheAware struct {
	index      *Index
	thresholds Thresholds
	blockSize  int
	rendezvous bool
	// byBacklog places a miss by prefill backlog (least_prefill).
	byBacklog bool
	fleetGate bool
	// overloadOnReports: Settings.OverloadOnReports.
	overloadOnReports bool
	heat              heat // recent hits per prefix, for hot-prefix spreading
}

var _ Policy = (*CacheAware)(nil)

// Name returns cache_aware or cache_aware_fleet_gate.
func (p *CacheAware) Name() string {
	if p.fleetGate {
		return PolicyFleetGate
	}
	return PolicyCacheAware
}

func (*CacheAware) recordsOwnership() {}

// routed counts a reserved decision's hit in its prefix's heat.
func (p *CacheAware) routed(c Choice) {
	if c.prefixKnown && p.thresholds.HotLoad > 0 {
		p.heat.note(c.prefix, p.index.clock.Now())
	}
}

// Select implements the per-request overload check of the cache-aware policy.
func (p *CacheAware) Select(req *Request, pool *Pool) Choice {
	sp := pool.spread(req.burst, req.Tail)
	var buf [8]WorkerID
	depth, owners := p.match(req, pool, buf[:0])
	// A matched partial tail is the rest of the text.
	matched := min((depth+1)*p.blockSize, req.Len())
	hit := depth >= 0 && p.thresholds.Hit(matched, req.Len())
	if p.fleetGate {
		return p.fleetGateSelect(req, pool, sp, owners, hit, matched)
	}
	shed := false
	if hit {
		key := req.Hashes[depth]
		c := p.pickOwner(req, pool, sp, depth, owners)
		owner := true
		if p.isHot(req, depth, c.Load.selectLoad(c.Seen, req.burst), sp.min) {
			var more [8]WorkerID
			c = p.pickOwner(req, pool, sp, depth, p.hotCandidates(key, pool, sp, req.burst, owners, more[:0]))
			owner = slices.Contains(owners, c.Load.id)
		}
		c.prefix, c.prefixKnown = key, true
		if !p.overloaded(c, pool, sp, req.burst) {
			// A request sent to a hot prefix's new owner is a miss there: it
			// brings the prefix with it.
			c.Hit, c.Matched = owner, matched
			return c
		}
		shed = true
	}
	if !shed {
		// Too little of it matched for a hit: where it goes past a prefix
		// others share, it still goes where its turns would have gone.
		if c, ok := p.ownerByOwnBlock(req, pool, depth, owners); ok {
			c.Matched = matched
			return c
		}
	}
	c := p.placeMiss(req, pool, sp, depth)
	c.Matched, c.Shed = matched, shed
	return c
}

// pickOwner chooses among the candidates for a hit. In a tier, a request
// that goes on past a prefix others share (a session's turn that matched
// only the system prompt every session starts with) takes the first of them
// in the rendezvous order of its first own block that is not busy; anywhere
// else, and when every candidate is busy, the least loaded.
//
// The order is what lets replicas that have not heard of each other's
// choices agree: a session whose earlier turns one replica placed, and whose
// next turn reaches a replica that has not heard of them (the two sides of a
// partition, or a peer's report still on its way), matches the shared
// prefix alone there, and least load, read on each replica's own view,
// would send it to another worker than its cache's. Its own first block is
// the same on every replica and every turn, so the order names the same
// owner on both as long as that owner is within the hot-prefix bound of the
// least loaded, which is how far a tier's placement already lets a cold
// miss's rendezvous worker run ahead.
//
// A turn with too little matched for a hit (a long conversation whose
// shared prefix is a small part of it) is placed among the same owners in
// the same order, so that its replica agrees with the one that placed its
// first turn as a hit.
func (p *CacheAware) pickOwner(req *Request, pool *Pool, sp spread, depth int, cands []WorkerID) Choice {
	if c, ok := p.ownerByOwnBlock(req, pool, depth, cands); ok {
		return c
	}
	return leastLoaded(pool, cands, req.burst, req.Tail)
}

// ownerByOwnBlock is pickOwner's choice by order, false where it chooses by
// load.
func (p *CacheAware) ownerByOwnBlock(req *Request, pool *Pool, depth int, cands []WorkerID) (Choice, bool) {
	key, ok := p.ownBlock(req, depth)
	if !ok {
		return Choice{}, false
	}
	// Busy is judged on the loads the replicas reported, without this
	// replica's guess at its peers' share of its own recent requests: the
	// guess is what spreads a burst of one prefix, but here every session
	// has its own order already, and a guess that differs between two
	// replicas would send one session to two workers.
	return p.firstNotBusy(pool, cands, key, pool.spread(burstView{}, 0).min)
}

// ownBlock is the key of req's first block past a shared prefix matched to
// depth, in a tier: false alone (peers' choices are all seen), when req
// ends within the match, or when the match is no prefix others share.
func (p *CacheAware) ownBlock(req *Request, depth int) (uint64, bool) {
	if req.burst.peers == 0 || depth < 0 || depth+1 >= len(req.Hashes) || !p.index.Forks(req.Hashes[depth], depth) {
		return 0, false
	}
	return req.Hashes[depth+1], true
}

// firstNotBusy returns the first of cands in the rendezvous order of key
// whose reported load is within the hot-prefix bound of min; false when
// every one is busy.
func (p *CacheAware) firstNotBusy(pool *Pool, cands []WorkerID, key uint64, min int64) (Choice, bool) {
	best, bestScore, bestSeen := -1, uint64(0), int64(0)
	for _, w := range cands {
		i := pool.position(w)
		m := pool.At(i)
		seen := m.local.Load()
		if p.busy(m.selectLoad(seen, burstView{}), min) {
			continue
		}
		if s := rendezvousScore(key, m.id); best < 0 || s > bestScore {
			best, bestScore, bestSeen = i, s, seen
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	return Choice{Load: pool.At(best), Seen: bestSeen}, true
}

// overloaded is the overload check of a hit on c: on the loads with the
// peers' share (burst), or without it when overloadOnReports.
func (p *CacheAware) overloaded(c Choice, pool *Pool, sp spread, burst burstView) bool {
	if p.overloadOnReports && burst.peers > 0 {
		return p.thresholds.Overloaded(c.Load.selectLoad(c.Seen, burstView{}), pool.spread(burstView{}, 0).min)
	}
	return p.thresholds.Overloaded(c.Load.selectLoad(c.Seen, burst), sp.min)
}

// isHot reports whether the prefix ending in block req.Hashes[depth], whose least-loaded
// owner holds load, should gain an owner: the owner holds HotLoad requests
// more than the least-loaded candidate (min), and the prefix had at least
// HotLoad hits lately across the tier.
//
// A replica sees its share of the tier's hits on a shared prefix (every
// session's first turn on one system prompt reaches every replica), so its
// own count, this request included, is scaled by the live replicas (the peer
// share's count, plus itself). The scaling is what spreads a burst before
// any report: without it each replica sends its first hits to the prefix's
// owner before it counts as hot, and the owner takes the replicas' count
// times that. A conversation's own prefix is not shared: its turns reach
// one replica at a time, so its count is not scaled, and a session is not
// moved off its cache because its owner is busy.
func (p *CacheAware) isHot(req *Request, depth int, load, min int64) bool {
	if !p.thresholds.hot(load, min) {
		return false // before the index is asked whether the prefix is shared
	}
	hits := p.heat.of(req.Hashes[depth], p.index.clock.Now())
	if p.shared(req, depth) {
		hits = (hits + 1) * float64(req.burst.peers+1)
	}
	return hits >= p.thresholds.HotLoad
}

// shared reports whether req's match at depth is a prefix others share: the
// request ends within it (the same prompt again), or a request recorded
// here went on past it (the prefix forks), rather than req continuing the
// one conversation that ended there.
func (p *CacheAware) shared(req *Request, depth int) bool {
	return depth+1 >= len(req.Hashes) || p.index.Forks(req.Hashes[depth], depth)
}

// hotCandidates widens a hot prefix's owners: while every candidate holds
// HotLoad requests more than the least-loaded worker and there are fewer than
// HotOwners, the next worker in the rendezvous order of the prefix's deepest
// matched block joins them. The order depends on the block and the pool
// alone, so every replica that knows the prefix as deep spreads it to the
// same workers without a word, and the requests those workers take record
// them as owners, so the prefix's next requests find its cache there. When
// the burst passes, the owners drop under the bound and the prefix gains no
// more. The result is owners followed by the new candidates, in dst.
func (p *CacheAware) hotCandidates(key uint64, pool *Pool, sp spread, v burstView, owners, dst []WorkerID) []WorkerID {
	dst = append(dst, owners...)
	least := int64(-1) // the least load among the candidates
	for _, w := range owners {
		m := pool.At(pool.position(w))
		if l := m.selectLoad(m.local.Load(), v); least < 0 || l < least {
			least = l
		}
	}
	width, added := p.spreadWidth(v), 0
	for len(dst) < p.thresholds.HotOwners && (p.thresholds.hot(least, sp.min) || (added > 0 && added < width)) {
		next, nextScore := -1, uint64(0)
		for i := range pool.Len() {
			m := pool.At(i)
			if s := rendezvousScore(key, m.id); (next < 0 || s > nextScore) && !slices.Contains(dst, m.id) {
				next, nextScore = i, s
			}
		}
		if next < 0 {
			break // every candidate is an owner already
		}
		m := pool.At(next)
		dst = append(dst, m.id)
		added++
		least = min(least, m.selectLoad(m.local.Load(), v))
	}
	return dst
}

// placeMiss chooses a worker for a request that goes where nothing of it is
// cached (yet).
//
// In a tier (the peer share knows of live peers), a cold miss, one that
// matched nothing, is placed by rendezvous whatever the placement: requests
// that start the same new prefix in the same instant (a group of rollouts
// sharing a task prompt) reach several replicas before any has heard of the
// others, and least load would give each its own worker, whereas the
// rendezvous order of the prefix's first block gives them all the same ones
// without a word. A miss that matched something (a shed hit, a prefix known
// too shallowly) keeps the placement's choice.
//
// In that first instant each replica can send one cold miss to the prefix's
// first worker before it counts the prefix hot, so the prefix's requests
// are spread over its first spreadWidth workers in the rendezvous order,
// each request to the one its own text picks: the same prompt again (the
// rollouts of one task) goes to the same worker, and no worker takes more
// than about HotLoad of the burst.
func (p *CacheAware) placeMiss(req *Request, pool *Pool, sp spread, depth int) Choice {
	if c, ok := p.home(req, pool, sp); ok {
		return c
	}
	if !p.rendezvous && (depth >= 0 || req.burst.peers == 0) {
		if p.byBacklog {
			return p.leastBacklog(req, pool, sp)
		}
		return sp.pick(pool)
	}
	key := req.Tail
	if depth+1 < len(req.Hashes) {
		key = req.Hashes[depth+1]
	}
	var buf [8]scored
	top := buf[:0]
	width := p.spreadWidth(req.burst)
	for i := range pool.Len() {
		m := pool.At(i)
		seen := m.local.Load()
		if p.busy(m.selectLoad(seen, req.burst), sp.min) {
			continue
		}
		top = insertTop(top, scored{Choice{Load: m, Seen: seen}, rendezvousScore(key, m.id)}, width)
	}
	if len(top) == 0 {
		return sp.pick(pool)
	}
	return top[req.Tail%uint64(len(top))].Choice
}

// home is req's former worker (Request.Home) when it is a candidate and not
// busy, in a tier: a miss that goes back where its prefix was, whatever the
// placement. One router alone places such misses by its placement, on loads
// it sees whole (on llm-d-inference-sim it cached 0.6% fewer prompt tokens
// sending them home).
func (p *CacheAware) home(req *Request, pool *Pool, sp spread) (Choice, bool) {
	if req.Home == 0 || req.burst.peers == 0 && !req.Placer {
		return Choice{}, false
	}
	i := pool.position(req.Home)
	if i < 0 {
		return Choice{}, false // it left the pool: removed, or the attempt that failed there
	}
	m := pool.At(i)
	seen := m.local.Load()
	if p.busy(m.selectLoad(seen, req.burst), sp.min) {
		return Choice{}, false
	}
	return Choice{Load: m, Seen: seen}, true
}

// leastBacklog is the least_prefill placement: the candidate with the least
// prefill backlog among those within the hot-prefix bound of the least
// loaded (not busy), ties broken as least load breaks them.
//
// A miss's first token waits for the prompts queued ahead of it on its
// worker as well as for its own, and a count of requests does not say how
// much prompt is queued: a worker whose requests are decoding is free to
// prefill, one that took a long conversation whose cache was evicted is
// not. The count keeps its say through the bound, so a worker full of long
// decodes is not handed every miss.
func (p *CacheAware) leastBacklog(req *Request, pool *Pool, sp spread) Choice {
	best, bestLoad, bestSeen, bestBacklog := -1, int64(0), int64(0), int64(0)
	for i := range pool.Len() {
		m := pool.At(i)
		seen := m.local.Load()
		l := m.selectLoad(seen, req.burst)
		if p.busy(l, sp.min) {
			continue
		}
		b := m.MergedBacklog()
		if best < 0 || b < bestBacklog || b == bestBacklog && less(l, m, bestLoad, pool.At(best), req.Tail) {
			best, bestLoad, bestSeen, bestBacklog = i, l, seen, b
		}
	}
	if best < 0 {
		return sp.pick(pool)
	}
	return Choice{Load: pool.At(best), Seen: bestSeen}
}

// spreadWidth is how many workers share a cold prefix's first instant: one
// per HotLoad live replicas, at least one.
func (p *CacheAware) spreadWidth(v burstView) int {
	if p.thresholds.HotLoad <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(float64(v.peers+1)/p.thresholds.HotLoad)))
}

// scored is a candidate and its rendezvous score.
type scored struct {
	Choice
	score uint64
}

// insertTop keeps top the width best-scored candidates, best first.
func insertTop(top []scored, c scored, width int) []scored {
	i := len(top)
	for i > 0 && top[i-1].score < c.score {
		i--
	}
	if i >= width {
		return top
	}
	top = slices.Insert(top, i, c)
	if len(top) > width {
		top = top[:width]
	}
	return top
}

// busy reports whether a worker with load is too busy to take a cold miss by
// rendezvous: HotLoad requests above the least loaded (min), the bound at
// which a hot prefix spreads, or overloaded where spreading is off.
func (p *CacheAware) busy(load, min int64) bool {
	if p.thresholds.HotLoad > 0 {
		return p.thresholds.hot(load, min)
	}
	return p.thresholds.Overloaded(load, min)
}

// fleetGateSelect is the old rule: if the fleet as a whole looks imbalanced,
// every request goes to the least-loaded worker, cached or not.
func (p *CacheAware) fleetGateSelect(req *Request, pool *Pool, sp spread, owners []WorkerID, hit bool, matched int) Choice {
	imbalanced := p.thresholds.Overloaded(sp.max, sp.min)
	if hit && !imbalanced {
		c := leastLoaded(pool, owners, req.burst, req.Tail)
		c.Hit, c.Matched = true, matched
		return c
	}
	c := sp.pick(pool)
	c.Matched, c.Shed = matched, hit
	return c
}

// leastLoaded returns the least-loaded of owners, which are all pool
// members, ties broken by less with salt (the request's key): replicas that
// know nothing of each other's choices (the new owners of a hot prefix in a
// burst's first instant) share the least-loaded out among their requests
// instead of all taking the first.
func leastLoaded(pool *Pool, owners []WorkerID, v burstView, salt uint64) Choice {
	best, bestLoad, bestSeen := -1, int64(0), int64(0)
	for _, w := range owners {
		i := pool.position(w)
		m := pool.At(i)
		seen := m.local.Load()
		l := m.selectLoad(seen, v)
		if best < 0 || less(l, m, bestLoad, pool.At(best), salt) {
			best, bestLoad, bestSeen = i, l, seen
		}
	}
	return Choice{Load: pool.At(best), Seen: bestSeen}
}
