package affinity

import "slices"

// Pool is an immutable set of candidate workers for one kind of request (one
// role and one model), in registry order. The proxy builds pools when the
// registry or the health of a worker changes, never per request; a retry
// narrows one with Without.
type Pool struct {
	members []*Load
	// slot maps a worker id to its position + 1 (0 = not a member): a dense
	// slice, since ids are small integers.
	slot []int32
}

// NewPool returns a pool of the given workers' counters, kept in the order
// given: that order is the last tie-breaker between equal loads.
func NewPool(members []*Load) *Pool {
	p := &Pool{members: members}
	var maxID WorkerID
	for _, m := range members {
		maxID = max(maxID, m.id)
	}
	if len(members) > 0 {
		p.slot = make([]int32, maxID+1)
	}
	for i, m := range members {
		p.slot[m.id] = int32(i + 1)
	}
	return p
}

// Len is the number of candidates.
func (p *Pool) Len() int { return len(p.members) }

// At returns the i-th candidate.
func (p *Pool) At(i int) *Load { return p.members[i] }

// position returns the index of worker id in the pool, or -1.
func (p *Pool) position(id WorkerID) int {
	if int(id) >= len(p.slot) {
		return -1
	}
	return int(p.slot[id]) - 1
}

// Contains reports whether worker id is a candidate.
func (p *Pool) Contains(id WorkerID) bool { return p.position(id) >= 0 }

// Without returns the pool minus the given workers (the ones a retry already
// tried). It returns p itself when none of them is a member.
func (p *Pool) Without(ids ...WorkerID) *Pool {
	if !slices.ContainsFunc(ids, p.Contains) {
		return p // the common case, a first attempt: no allocation
	}
	keep := make([]*Load, 0, len(p.members))
	for _, m := range p.members {
		if !containsID(ids, m.id) {
			keep = append(keep, m)
		}
	}
	return NewPool(keep)
}

// only returns the pool of its members at positions, which are in the
// pool's order: p itself when they are all of them.
func (p *Pool) only(positions []int) *Pool {
	if len(positions) == len(p.members) {
		return p
	}
	keep := make([]*Load, len(positions))
	for i, at := range positions {
		keep[i] = p.members[at]
	}
	return NewPool(keep)
}

func containsID(ids []WorkerID, id WorkerID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// less orders candidates for least-load choices: (load, processed, then the
// rendezvous score of salt, the request's own key). Processed is this
// replica's own count, so within a replica equal loads take turns; the
// score, not the pool's order, breaks the rest, so that replicas with
// little history (a tier of many, each seeing a few requests) do not all
// send their misses to the first workers of the list.
func less(loadA int64, a *Load, loadB int64, b *Load, salt uint64) bool {
	if loadA != loadB {
		return loadA < loadB
	}
	pa, pb := a.Processed(), b.Processed()
	if pa != pb {
		return pa < pb
	}
	return rendezvousScore(salt, a.id) > rendezvousScore(salt, b.id)
}

// spread is one pass over a pool: the smallest and largest merged load and
// the least-loaded member by less.
// leastSeen is the least-loaded member's local count as read in that pass:
// the reservation succeeds only if it is still the same.
type spread struct {
	min, max  int64
	least     int
	leastLoad int64
	leastSeen int64
}

func (p *Pool) spread(v burstView, salt uint64) spread {
	s := spread{least: -1}
	for i, m := range p.members {
		local := m.local.Load()
		l := m.selectLoad(local, v)
		if s.least < 0 {
			s = spread{min: l, max: l, least: i, leastLoad: l, leastSeen: local}
			continue
		}
		s.min, s.max = min(s.min, l), max(s.max, l)
		if less(l, m, s.leastLoad, p.members[s.least], salt) {
			s.least, s.leastLoad, s.leastSeen = i, l, local
		}
	}
	return s
}

// pick is the least-loaded member as a choice.
func (s spread) pick(p *Pool) Choice {
	return Choice{Load: p.At(s.least), Seen: s.leastSeen}
}
