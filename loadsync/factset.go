package loadsync

// factKey folds a fact into one 64-bit key. Block hashes are uniform, so
// mixing the worker in with a multiplier keeps keys of different (hash,
// worker) pairs apart with overwhelming probability.
func factKey(f Fact) uint64 {
	return f.Hash ^ (uint64(f.Worker)+1)*0x9e3779b97f4a7c15
}

// factSet remembers about the last limit facts added, in two generations:
// when the current one fills up it becomes the previous one and the old
// previous one is forgotten. A hit in the previous generation is promoted,
// so a fact in steady use is never forgotten. Not safe for concurrent use.
type factSet struct {
	cur, prev map[uint64]struct{}
	half      int
}

func newFactSet(limit int) factSet {
	half := max(limit/2, 1)
	return factSet{cur: make(map[uint64]struct{}, half), prev: make(map[uint64]struct{}, half), half: half}
}

// add records f and reports whether it was new.
func (s *factSet) add(f Fact) bool {
	k := factKey(f)
	if _, ok := s.cur[k]; ok {
		return false
	}
	_, seen := s.prev[k]
	if len(s.cur) >= s.half {
		s.cur, s.prev = s.prev, s.cur
		clear(s.cur)
	}
	s.cur[k] = struct{}{}
	return !seen
}

// rotate starts a new generation: what was current becomes previous, and
// the old previous generation is forgotten.
func (s *factSet) rotate() {
	s.cur, s.prev = s.prev, s.cur
	clear(s.cur)
}

// addFresh records f and reports whether it is missing from the current
// generation: unlike add, a fact found only in the previous generation
// counts as new again (it is due for a refresh).
func (s *factSet) addFresh(f Fact) bool {
	k := factKey(f)
	if _, ok := s.cur[k]; ok {
		return false
	}
	if len(s.cur) >= s.half {
		s.rotate()
	}
	s.cur[k] = struct{}{}
	return true
}

// factRing keeps the last len(buf) facts, oldest overwritten first. Not safe
// for concurrent use.
type factRing struct {
	buf   []Fact
	next  int // index the next push writes
	count int
}

func newFactRing(size int) factRing { return factRing{buf: make([]Fact, max(size, 1))} }

// push appends f and reports whether the oldest fact was overwritten.
func (r *factRing) push(f Fact) (overwrote bool) {
	r.buf[r.next] = f
	r.next = (r.next + 1) % len(r.buf)
	if r.count == len(r.buf) {
		return true
	}
	r.count++
	return false
}

// newest appends the most recent n facts to dst, oldest first.
func (r *factRing) newest(dst []Fact, n int) []Fact {
	n = min(n, r.count)
	start := (r.next - n + len(r.buf)) % len(r.buf)
	for i := range n {
		dst = append(dst, r.buf[(start+i)%len(r.buf)])
	}
	return dst
}

// popOldest removes up to n of the oldest facts and appends them to dst.
func (r *factRing) popOldest(dst []Fact, n int) []Fact {
	n = min(n, r.count)
	start := (r.next - r.count + len(r.buf)) % len(r.buf)
	for i := range n {
		dst = append(dst, r.buf[(start+i)%len(r.buf)])
	}
	r.count -= n
	return dst
}

func (r *factRing) len() int { return r.count }

// oldest returns the i-th oldest fact; i must be below len().
func (r *factRing) oldest(i int) Fact {
	return r.buf[(r.next-r.count+i+2*len(r.buf))%len(r.buf)]
}
