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
//     gains the next worker in the rendezvous order of its key, as a hot
//     prefix does: every replica picks the same one without a word;
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

// slotState is what the table says of one candidate for one adapter.
type slotState struct {
	resident bool // the adapter is in the worker's slots
	// room: the adapter holds a slot, or a slot served no other adapter
	// within AdapterWindow.
	room bool
}

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
// workers in the rendezvous order of its key, those with room first, while
// every one kept holds HotLoad requests above floor (the least loaded
// candidate's), up to HotOwners.
func spreadHot(k AdapterKey, pool *Pool, cands []adapterCandidate, keep []int, least, floor int64, th Thresholds) []int {
	for len(keep) < max(th.HotOwners, 1) && th.hot(least, floor) {
		next := nextByRendezvous(k, pool, cands, keep)
		if next < 0 {
			break
		}
		keep = append(keep, next)
		least = min(least, cands[next].load)
	}
	slices.Sort(keep) // the pool's order, the policies' last tie-breaker
	return keep
}

// nextByRendezvous is the position of the highest-scored candidate for k
// not in taken, among those with room if any has; -1 when none is left.
func nextByRendezvous(k AdapterKey, pool *Pool, cands []adapterCandidate, taken []int) int {
	best, bestRoom, bestScore := -1, false, uint64(0)
	for _, c := range cands {
		if slices.Contains(taken, c.i) {
			continue
		}
		s := rendezvousScore(uint64(k), pool.At(c.i).id)
		if best < 0 || (c.room && !bestRoom) || (c.room == bestRoom && s > bestScore) {
			best, bestRoom, bestScore = c.i, c.room, s
		}
	}
	return best
}

// roomFor appends to dst the positions of the workers an adapter resident
// nowhere may go to: those with room that are not busy (HotLoad above the
// least loaded, or overloaded where spreading is off), else those with
// room, else those not busy, else all of them. The policy chooses among
// them as among any candidates: a cold miss of a tier by the rendezvous
// order of its prefix, so that replicas placing a new adapter in the same
// instant agree, else by load.
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

// state is what the table says of adapter k on worker w at now: whether k
// is among the Slots adapters active there most recently (any seen, when
// Slots is unknown), and whether a slot is free of other adapters' requests.
func (a *Adapters) state(w WorkerID, k AdapterKey, now time.Time) slotState {
	if a == nil {
		return slotState{room: true}
	}
	e := a.worker(w)
	if e == nil {
		return slotState{room: true}
	}
	slots := 0
	if v := e.view.Load(); v != nil {
		slots = v.Slots
	}
	r := residency{key: k, now: now}
	a.tally(w, &r)
	return r.state(slots)
}

// Busy is how many adapters hold a slot of w's engine now, by the table:
// running or waiting in its latest reading, or with requests of the tier
// in flight there.
func (a *Adapters) Busy(w WorkerID) int {
	r := residency{now: a.clock.Now()}
	a.tally(w, &r)
	return r.busyOthers
}

// Slots is the max_lora of w's engine as the table knows it, 0 unknown.
func (a *Adapters) Slots(w WorkerID) int {
	if e := a.worker(w); e != nil {
		if v := e.view.Load(); v != nil {
			return v.Slots
		}
	}
	return 0
}

// tally adds what the table knows of w's adapters to r.
func (a *Adapters) tally(w WorkerID, r *residency) {
	e := a.worker(w)
	if e == nil {
		return
	}
	if v := e.view.Load(); v != nil {
		for _, s := range v.Seen {
			r.add(s.Key, s.Last, s.BusyUntil.After(r.now))
		}
	}
	for key, u := range *e.uses.Load() {
		r.add(key, u.lastAt(r.now), u.inflight.Load() > 0)
	}
}

// residency tallies one worker's adapters against one adapter, key: how
// recently key was active there, how many adapters were active since, and
// how many others hold a slot now. An adapter seen by the tier and used by
// this replica is counted once, at its latest.
type residency struct {
	key        AdapterKey
	now        time.Time
	last       time.Time // key's; zero when not seen
	busy       bool      // key's
	others     []adapterMark
	busyOthers int
}

// adapterMark is another adapter's latest activity on the worker.
type adapterMark struct {
	key  AdapterKey
	last time.Time
	busy bool
}

func (r *residency) add(k AdapterKey, last time.Time, busy bool) {
	if busy {
		last = r.now
	}
	if k == r.key {
		r.last, r.busy = laterOf(r.last, last), r.busy || busy
		return
	}
	for i := range r.others {
		if o := &r.others[i]; o.key == k {
			if busy && !o.busy {
				r.busyOthers++
			}
			o.last, o.busy = laterOf(o.last, last), o.busy || busy
			return
		}
	}
	r.others = append(r.others, adapterMark{key: k, last: last, busy: busy})
	if busy {
		r.busyOthers++
	}
}

// state judges the tally for an engine of slots adapters (0: unknown).
func (r *residency) state(slots int) slotState {
	if slots == 0 {
		return slotState{resident: !r.last.IsZero(), room: true}
	}
	if r.last.IsZero() {
		return slotState{room: r.activeOthers() < slots}
	}
	since := 0 // other adapters active after key: LRU would evict key after slots of them
	for _, o := range r.others {
		if o.last.After(r.last) {
			since++
		}
	}
	resident := since < slots && (r.busy || r.busyOthers < slots)
	return slotState{resident: resident, room: resident || r.activeOthers() < slots}
}

// AdapterWindow is how long after its last request an adapter keeps its
// slot of a worker from new adapters: a worker whose slots all served
// other adapters this recently has no room for a new one while another
// has. An agent's next turn comes within seconds; an adapter given the
// slot of one idle between two turns swaps it out, and the next turn,
// finding it gone, goes on to swap out another's (without the window a
// tier swapped more than adapter-blind routing did).
const AdapterWindow = 10 * time.Second

// activeOthers is how many other adapters were active within
// AdapterWindow (or hold a slot now).
func (r *residency) activeOthers() int {
	n := 0
	for _, o := range r.others {
		if o.busy || r.now.Sub(o.last) < AdapterWindow {
			n++
		}
	}
	return n
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
