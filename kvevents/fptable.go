package kvevents

// The two tables a Set is made of: open addressing over 32-bit fingerprints
// (0 marks an empty slot), linear probing from a home slot that the
// fingerprint alone decides (so a fingerprint can be found again without
// the hash it came from), deletion by backward shift (no tombstones), and
// growth by doubling until the table's last size, which holds its limit at
// no more than maxLoad. At that load a full table costs 1.25 slots a
// fingerprint: 5 bytes a block in keySet, 10 in engineMap.

const (
	maxLoadNum, maxLoadDen = 4, 5 // 0.8
	minSlots               = 64
)

// slotsFor is the size a table of n fingerprints grows to when its limit
// is limit: doubling from minSlots, but never past the size that holds limit
// at maxLoad.
func slotsFor(n, limit, have int) int {
	last := (limit*maxLoadDen+maxLoadNum-1)/maxLoadNum + 1
	size := max(have, minSlots)
	for n*maxLoadDen > size*maxLoadNum && size < last {
		size = min(2*size, last)
	}
	return size
}

// home is fp's home slot in a table of size slots (Lemire's fast range).
func home(fp uint32, size int) int { return int(uint64(fp) * uint64(size) >> 32) }

// keySet is a set of keys.
type keySet struct {
	slots []Key
	n     int
}

func (s *keySet) has(k Key) bool {
	if len(s.slots) == 0 {
		return false
	}
	for i := home(uint32(k), len(s.slots)); ; i = s.next(i) {
		switch s.slots[i] {
		case k:
			return true
		case 0:
			return false
		}
	}
}

// add inserts k unless the set is at limit; false when it is (and k is
// not in it).
func (s *keySet) add(k Key, limit int) bool {
	if s.has(k) {
		return true
	}
	if s.n >= limit {
		return false
	}
	s.grow(s.n+1, limit)
	i := home(uint32(k), len(s.slots))
	for s.slots[i] != 0 {
		i = s.next(i)
	}
	s.slots[i] = k
	s.n++
	return true
}

func (s *keySet) remove(k Key) bool {
	if len(s.slots) == 0 {
		return false
	}
	for i := home(uint32(k), len(s.slots)); s.slots[i] != 0; i = s.next(i) {
		if s.slots[i] == k {
			s.shiftBack(i)
			s.n--
			return true
		}
	}
	return false
}

// shiftBack empties slot i and moves back the entries after it that probed
// past it, so that every entry stays reachable from its home.
func (s *keySet) shiftBack(i int) {
	for j := s.next(i); s.slots[j] != 0; j = s.next(j) {
		if h := home(uint32(s.slots[j]), len(s.slots)); between(i, h, j) {
			continue // j is at or before its home's run from i: it stays
		}
		s.slots[i], i = s.slots[j], j
	}
	s.slots[i] = 0
}

func (s *keySet) next(i int) int {
	if i++; i == len(s.slots) {
		return 0
	}
	return i
}

func (s *keySet) grow(n, limit int) {
	size := slotsFor(n, limit, len(s.slots))
	if size == len(s.slots) {
		return
	}
	old := s.slots
	s.slots, s.n = make([]Key, size), 0
	for _, k := range old {
		if k != 0 {
			i := home(uint32(k), size)
			for s.slots[i] != 0 {
				i = s.next(i)
			}
			s.slots[i] = k
			s.n++
		}
	}
}

func (s *keySet) reset() { *s = keySet{} }

// between says whether h lies in the cyclic interval (i, j]: an entry at j
// whose home h is there must not move back to i.
func between(i, h, j int) bool {
	if i <= j {
		return i < h && h <= j
	}
	return i < h || h <= j
}

// engineMap maps an engine's block names (by engineFP) to the keys of those
// blocks: a slot holds the name's fingerprint in its high half and the key
// in its low one.
type engineMap struct {
	slots []uint64
	n     int
}

func entryFP(e uint64) uint32 { return uint32(e >> 32) }

func (m *engineMap) find(fp uint32) (int, bool) {
	if len(m.slots) == 0 {
		return 0, false
	}
	for i := home(fp, len(m.slots)); m.slots[i] != 0; i = m.next(i) {
		if entryFP(m.slots[i]) == fp {
			return i, true
		}
	}
	return 0, false
}

func (m *engineMap) has(fp uint32) bool {
	_, ok := m.find(fp)
	return ok
}

func (m *engineMap) get(fp uint32) (Key, bool) {
	i, ok := m.find(fp)
	if !ok {
		return 0, false
	}
	return Key(m.slots[i]), true
}

// put maps fp to k unless the map is at limit (false then); the key fp
// mapped to before, if any, is returned.
func (m *engineMap) put(fp uint32, k Key, limit int) (old Key, ok bool) {
	if i, found := m.find(fp); found {
		old = Key(m.slots[i])
		m.slots[i] = uint64(fp)<<32 | uint64(k)
		return old, true
	}
	if m.n >= limit {
		return 0, false
	}
	m.grow(m.n+1, limit)
	i := home(fp, len(m.slots))
	for m.slots[i] != 0 {
		i = m.next(i)
	}
	m.slots[i] = uint64(fp)<<32 | uint64(k)
	m.n++
	return 0, true
}

// take removes fp's entry and returns its key.
func (m *engineMap) take(fp uint32) (Key, bool) {
	i, ok := m.find(fp)
	if !ok {
		return 0, false
	}
	k := Key(m.slots[i])
	for j := m.next(i); m.slots[j] != 0; j = m.next(j) {
		if h := home(entryFP(m.slots[j]), len(m.slots)); between(i, h, j) {
			continue
		}
		m.slots[i], i = m.slots[j], j
	}
	m.slots[i] = 0
	m.n--
	return k, true
}

func (m *engineMap) next(i int) int {
	if i++; i == len(m.slots) {
		return 0
	}
	return i
}

func (m *engineMap) grow(n, limit int) {
	size := slotsFor(n, limit, len(m.slots))
	if size == len(m.slots) {
		return
	}
	old := m.slots
	m.slots, m.n = make([]uint64, size), 0
	for _, e := range old {
		if e != 0 {
			i := home(entryFP(e), size)
			for m.slots[i] != 0 {
				i = m.next(i)
			}
			m.slots[i] = e
			m.n++
		}
	}
}

func (m *engineMap) reset() { *m = engineMap{} }

// each calls fn with every entry.
func (m *engineMap) each(fn func(fp uint32, k Key)) {
	for _, e := range m.slots {
		if e != 0 {
			fn(entryFP(e), Key(e))
		}
	}
}
