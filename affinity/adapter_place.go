package affinity

import (
	"slices"
	"time"
)

// Where a request for a LoRA adapter may go, before its policy chooses:
//
//   - where the adapter is resident (in a worker's slots by the table),
//     unless that worker is overloaded by the per-request check against
//     the least-loaded worker that serves the adapter: the engine runs it
//     without a swap, and its prefixes under the adapter are cached there;
//   - a hot adapter, whose resident workers all hold --hot-prefix-load
//     requests above the least loaded and which had as many requests in
//     the last second (a replica counts its own times the live replicas),
//     gains the next worker with room in the rendezvous order of its key,
//     as a hot prefix does: every replica picks the same one without a
//     word;
//   - an adapter resident nowhere (or only on overloaded workers) goes to
//     the workers with a slot no other adapter used within AdapterWindow
//     that are within --hot-prefix-load of the least loaded (else those
//     with such a slot, else those within the bound): no engine is sent a
//     new adapter while its max_lora slots serve others if another has
//     room, and an agent's adapter between two turns keeps its slot. In a
//     tier, to the first of those in the adapter's rendezvous order: the
//     replicas that place a new adapter in the same instant agree without
//     a word (alone, a replica's own requests in flight make the adapter
//     resident at once, and its policy chooses among them).
//
// The policy then chooses among those as it always does (cache_aware by
// prefix, least_load by load).

// adapterCandidate is one member of the pool, weighed for an adapter.
type adapterCandidate struct {
	slotState
	i    int   // its position in the pool
	load int64 // its load as selection sees it
}

// narrow is the pool an adapter request's policy chooses from (see above):
// pool itself for a request of the base model, or when every worker is a
// candidate.
func (a *Adapters) narrow(req *Request, pool *Pool, th Thresholds) *Pool {
	if req.Adapter == 0 || pool.Len() <= 1 {
		return pool
	}
	sp := pool.spread(req.burst, req.Tail)
	var buf [16]adapterCandidate
	cands := a.candidates(req, pool, buf[:0])
	var keep []int
	least := int64(-1) // the least load among the resident candidates kept
	for _, c := range cands {
		if c.resident && !th.Overloaded(c.load, sp.min) {
			keep = append(keep, c.i)
			if least < 0 || c.load < least {
				least = c.load
			}
		}
	}
	if len(keep) == 0 {
		room := roomFor(cands, sp, th, keep)
		if req.burst.peers > 0 {
			room = []int{firstByRendezvous(req.Adapter, pool, room)}
		}
		return pool.only(room)
	}
	if a.isHot(req, least, sp.min, th) {
		keep = spreadHot(req.Adapter, pool, cands, keep, least, sp.min, th)
	}
	return pool.only(keep)
}

// candidates weighs every member of pool for req's adapter, in dst; a nil
// table knows of no adapter anywhere.
func (a *Adapters) candidates(req *Request, pool *Pool, dst []adapterCandidate) []adapterCandidate {
	var now time.Time
	if a != nil {
		now = a.clock.Now()
	}
	for i := range pool.Len() {
		m := pool.At(i)
		dst = append(dst, adapterCandidate{slotState: a.state(m.id, req.Adapter, now), i: i,
			load: m.selectLoad(m.local.Load(), req.burst)})
	}
	return dst
}

// AdapterHome is the worker of pool (not empty) the proxy loads an adapter
// no worker lists yet on: of the workers an adapter resident nowhere may go
// to (roomFor), the least loaded, ties by the adapter's rendezvous order. A
// router without a residency table sees every slot free.
func (r *Router) AdapterHome(k AdapterKey, pool *Pool) WorkerID {
	th := r.thresholds
	if r.adapters == nil {
		th = DefaultThresholds()
	}
	req := &Request{Adapter: k, burst: r.loads.burstNow()}
	var buf [16]adapterCandidate
	cands := r.adapters.candidates(req, pool, buf[:0])
	best := -1
	for _, i := range roomFor(cands, pool.spread(req.burst, 0), th, nil) {
		if c := cands[i]; best < 0 || less(c.load, pool.At(i), cands[best].load, pool.At(best), uint64(k)) {
			best = i
		}
	}
	return pool.At(best).id
}

// isHot reports whether an adapter whose least-loaded resident worker holds
// least should gain a worker: HotLoad requests above the least loaded
// (min), and at least HotLoad requests of it lately across the tier (this
// replica's own, this one included, times the live replicas: the load
// balancer spreads an adapter's requests over them).
func (a *Adapters) isHot(req *Request, least, floor int64, th Thresholds) bool {
	if !th.hot(least, floor) {
		return false
	}
	hits := (a.heat.of(uint64(req.Adapter), a.clock.Now()) + 1) * float64(req.burst.peers+1)
	return hits >= th.HotLoad
}

// spreadHot adds to keep, a hot adapter's resident workers, the next
// workers in the rendezvous order of its key among those with room, while
// every one kept holds HotLoad requests above floor (the least loaded
// candidate's), up to HotOwners. A worker whose slots serve others gains
// no hot adapter: its engine would hold the others' requests back while
// the hot one keeps a slot busy (vLLM's scheduler skips a request whose
// adapter finds max_lora others running), and those, of adapters asked for
// less, would wait the longest.
func spreadHot(k AdapterKey, pool *Pool, cands []adapterCandidate, keep []int, least, floor int64, th Thresholds) []int {
	for len(keep) < max(th.HotOwners, 1) && th.hot(least, floor) {
		next := nextWithRoom(k, pool, cands, keep)
		if next < 0 {
			break
		}
		keep = append(keep, next)
		least = min(least, cands[next].load)
	}
	slices.Sort(keep) // the pool's order, the policies' last tie-breaker
	return keep
}

// nextWithRoom is the position of the highest-scored candidate for k with
// room, not in taken; -1 when none is left.
func nextWithRoom(k AdapterKey, pool *Pool, cands []adapterCandidate, taken []int) int {
	best, bestScore := -1, uint64(0)
	for _, c := range cands {
		if !c.room || slices.Contains(taken, c.i) {
			continue
		}
		if s := rendezvousScore(uint64(k), pool.At(c.i).id); best < 0 || s > bestScore {
			best, bestScore = c.i, s
		}
	}
	return best
}

// roomFor appends to dst the positions of the workers an adapter resident
// nowhere may go to: those with room that are not busy (HotLoad above the
// least loaded, or overloaded where spreading is off), else those with
// room, else those not busy, else all of them.
func roomFor(cands []adapterCandidate, sp spread, th Thresholds, dst []int) []int {
	busy := func(c adapterCandidate) bool {
		if th.HotLoad > 0 {
			return th.hot(c.load, sp.min)
		}
		return th.Overloaded(c.load, sp.min)
	}
	for _, ok := range []func(adapterCandidate) bool{
		func(c adapterCandidate) bool { return c.room && !busy(c) },
		func(c adapterCandidate) bool { return c.room },
		func(c adapterCandidate) bool { return !busy(c) },
		func(adapterCandidate) bool { return true },
	} {
		for _, c := range cands {
			if ok(c) {
				dst = append(dst, c.i)
			}
		}
		if len(dst) > 0 {
			return dst
		}
	}
	return dst
}

// firstByRendezvous is the position among positions whose worker comes
// first in k's rendezvous order.
func firstByRendezvous(k AdapterKey, pool *Pool, positions []int) int {
	best, bestScore := -1, uint64(0)
	for _, i := range positions {
		if s := rendezvousScore(uint64(k), pool.At(i).id); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}
