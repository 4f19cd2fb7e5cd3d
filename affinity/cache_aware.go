package affinity

import "slices"

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
	fleetGate  bool
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
	sp := pool.spread(req.burst)
	var buf [8]WorkerID
	depth, owners := p.match(req, pool, buf[:0])
	// A matched partial tail is the rest of the text.
	matched := min((depth+1)*p.blockSize, len(req.Text))
	hit := depth >= 0 && p.thresholds.Hit(matched, len(req.Text))
	if p.fleetGate {
		return p.fleetGateSelect(req, pool, sp, owners, hit, matched)
	}
	shed := false
	if hit {
		key := req.Hashes[depth]
		c := leastLoaded(pool, owners, req.burst)
		owner := true
		if p.isHot(key, c.Load.selectLoad(c.Seen, req.burst), sp.min, req.burst) {
			var more [8]WorkerID
			c = leastLoaded(pool, p.hotCandidates(key, pool, sp, req.burst, owners, more[:0]), req.burst)
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
	c := p.placeMiss(req, pool, sp, depth)
	c.Matched, c.Shed = matched, shed
	return c
}

// overloaded is the overload check of a hit on c: on the loads with the
// peers' share (burst), or without it when overloadOnReports.
func (p *CacheAware) overloaded(c Choice, pool *Pool, sp spread, burst burstView) bool {
	if p.overloadOnReports && burst.peers > 0 {
		return p.thresholds.Overloaded(c.Load.selectLoad(c.Seen, burstView{}), pool.spread(burstView{}).min)
	}
	return p.thresholds.Overloaded(c.Load.selectLoad(c.Seen, burst), sp.min)
}

// isHot reports whether the prefix ending in block key, whose least-loaded
// owner holds load, should gain an owner: the owner holds HotLoad requests
// more than the least-loaded candidate (min), and the prefix had at least
// HotLoad hits lately across the tier. A replica sees its share of the
// tier's requests, so its own count is scaled by the live replicas (the peer
// share's count, plus itself).
func (p *CacheAware) isHot(key uint64, load, min int64, v burstView) bool {
	if !p.thresholds.hot(load, min) {
		return false
	}
	return p.heat.of(key, p.index.clock.Now())*float64(v.peers+1) >= p.thresholds.HotLoad
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
	for len(dst) < p.thresholds.HotOwners && p.thresholds.hot(least, sp.min) {
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
// rendezvous score gives them all the same one without a word. A miss that
// matched something (a shed hit, a prefix known too shallowly) keeps the
// placement's choice.
func (p *CacheAware) placeMiss(req *Request, pool *Pool, sp spread, depth int) Choice {
	if !p.rendezvous && (depth >= 0 || req.burst.peers == 0) {
		return sp.pick(pool)
	}
	key := req.Tail
	if depth+1 < len(req.Hashes) {
		key = req.Hashes[depth+1]
	}
	best := sp.pick(pool)
	var bestScore uint64
	for i := range pool.Len() {
		m := pool.At(i)
		seen := m.local.Load()
		if p.thresholds.Overloaded(m.selectLoad(seen, req.burst), sp.min) {
			continue
		}
		if s := rendezvousScore(key, m.id); s > bestScore {
			best, bestScore = Choice{Load: m, Seen: seen}, s
		}
	}
	return best
}

// fleetGateSelect is the old rule: if the fleet as a whole looks imbalanced,
// every request goes to the least-loaded worker, cached or not.
func (p *CacheAware) fleetGateSelect(req *Request, pool *Pool, sp spread, owners []WorkerID, hit bool, matched int) Choice {
	imbalanced := p.thresholds.Overloaded(sp.max, sp.min)
	if hit && !imbalanced {
		c := leastLoaded(pool, owners, req.burst)
		c.Hit, c.Matched = true, matched
		return c
	}
	c := sp.pick(pool)
	c.Matched, c.Shed = matched, hit
	return c
}

// leastLoaded returns the least-loaded of owners, which are all pool members.
func leastLoaded(pool *Pool, owners []WorkerID, v burstView) Choice {
	best, bestLoad, bestSeen := -1, int64(0), int64(0)
	for _, w := range owners {
		i := pool.position(w)
		m := pool.At(i)
		seen := m.local.Load()
		l := m.selectLoad(seen, v)
		if best < 0 || less(l, m, i, bestLoad, pool.At(best), best) {
			best, bestLoad, bestSeen = i, l, seen
		}
	}
	return Choice{Load: pool.At(best), Seen: bestSeen}
}
