package kvevents

// The two tables a Set is made of are one kind of table: open addressing
// over entries that carry a 32-bit fingerprint (0 marks an empty slot),
// linear probing from a home slot that the fingerprint alone decides (so
// an entry can be found again without the hash it came from), deletion by
// backward shift (no tombstones), and growth by doubling until the table's
// last size, which holds its limit at no more than maxLoad. At that load a
// full table costs 1.25 slots an entry: 5 bytes a block in the set of keys
// (4-byte entries), 10 in the map of engine names (8-byte entries).

const (
	maxLoadNum, maxLoadDen = 4, 5 // 0.8
	minSlots               = 64
)

// slotsFor is the size a table of n entries grows to when its limit is
// limit: doubling from minSlots, but never past the size that holds limit
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

// fpTable is the open-addressing table of entries E, whose fingerprint fp
// gives (never 0 for an entry; the zero E is an empty slot).
type fpTable[E comparable] struct {
	slots []E
	n     int
	fp    func(E) uint32
}

// find is the slot of the entry of fingerprint fp.
func (t *fpTable[E]) find(fp uint32) (int, bool) {
	var empty E
	if len(t.slots) == 0 {
		return 0, false
	}
	for i := home(fp, len(t.slots)); t.slots[i] != empty; i = t.next(i) {
		if t.fp(t.slots[i]) == fp {
			return i, true
		}
	}
	return 0, false
}

// insert adds e, whose fingerprint no entry has, unless the table holds
// limit entries (false then).
func (t *fpTable[E]) insert(e E, limit int) bool {
	if t.n >= limit {
		return false
	}
	t.grow(t.n+1, limit)
	t.place(e)
	t.n++
	return true
}

func (t *fpTable[E]) place(e E) {
	var empty E
	i := home(t.fp(e), len(t.slots))
	for t.slots[i] != empty {
		i = t.next(i)
	}
	t.slots[i] = e
}

// removeAt empties slot i and moves back the entries after it that probed
// past it, so that every entry stays reachable from its home.
func (t *fpTable[E]) removeAt(i int) {
	var empty E
	for j := t.next(i); t.slots[j] != empty; j = t.next(j) {
		if h := home(t.fp(t.slots[j]), len(t.slots)); between(i, h, j) {
			continue // j is at or before its home's run from i: it stays
		}
		t.slots[i], i = t.slots[j], j
	}
	t.slots[i] = empty
	t.n--
}

func (t *fpTable[E]) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

func (t *fpTable[E]) grow(n, limit int) {
	var empty E
	size := slotsFor(n, limit, len(t.slots))
	if size == len(t.slots) {
		return
	}
	old := t.slots
	t.slots = make([]E, size)
	for _, e := range old {
		if e != empty {
			t.place(e)
		}
	}
}

func (t *fpTable[E]) reset() { t.slots, t.n = nil, 0 }

// between says whether h lies in the cyclic interval (i, j]: an entry at j
// whose home h is there must not move back to i.
func between(i, h, j int) bool {
	if i <= j {
		return i < h && h <= j
	}
	return i < h || h <= j
}

// keySet is a set of keys: a key is its own fingerprint.
type keySet struct{ fpTable[Key] }

func newKeySet() keySet { return keySet{fpTable[Key]{fp: func(k Key) uint32 { return uint32(k) }}} }

// has is find written out for keys, which are their own fingerprints: the
// lookup of every candidate's blocks, on the request path.
func (s *keySet) has(k Key) bool {
	if len(s.slots) == 0 {
		return false
	}
	for i := home(uint32(k), len(s.slots)); ; {
		switch s.slots[i] {
		case k:
			return true
		case 0:
			return false
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
}

// add inserts k unless the set is at limit; false when it is (and k is
// not in it).
func (s *keySet) add(k Key, limit int) bool {
	return s.has(k) || s.insert(k, limit)
}

func (s *keySet) remove(k Key) bool {
	i, ok := s.find(uint32(k))
	if ok {
		s.removeAt(i)
	}
	return ok
}

// engineMap maps an engine's block names (by engineFP) to the keys of those
// blocks: an entry holds the name's fingerprint in its high half and the
// key in its low one.
type engineMap struct{ fpTable[uint64] }

func newEngineMap() engineMap { return engineMap{fpTable[uint64]{fp: entryFP}} }

func entryFP(e uint64) uint32 { return uint32(e >> 32) }

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
	e := uint64(fp)<<32 | uint64(k)
	if i, found := m.find(fp); found {
		old, m.slots[i] = Key(m.slots[i]), e
		return old, true
	}
	return 0, m.insert(e, limit)
}

// take removes fp's entry and returns its key.
func (m *engineMap) take(fp uint32) (Key, bool) {
	i, ok := m.find(fp)
	if !ok {
		return 0, false
	}
	k := Key(m.slots[i])
	m.removeAt(i)
	return k, true
}

// each calls fn with every entry.
func (m *engineMap) each(fn func(fp uint32, k Key)) {
	for _, e := range m.slots {
		if e != 0 {
			fn(entryFP(e), Key(e))
		}
	}
}
