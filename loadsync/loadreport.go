package loadsync

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
)

// loadReport is one packet of an origin's load report: the counts of every
// worker in [lo, hi] whose count is not zero. A worker in the range that is
// absent has no load from this origin. An origin's whole report is the
// packets of one sequence number, whose ranges tile [0, MaxUint32].
//
// Layout after the header: origin (string), epoch, seq (uvarints), sentAt
// (signed varint, unix ns), lo, hi, count (uvarints), then count entries of
// (worker gap, in-flight): the first gap is the worker's distance from lo,
// later ones the number of ids skipped since the previous worker, so workers
// are strictly increasing by construction.
type loadReport struct {
	origin     string
	epoch, seq uint64
	sentAt     int64
	lo, hi     uint32
	entries    []WorkerLoad
}

// loadEntryMinBytes is the smallest encoding of one entry.
const loadEntryMinBytes = 2

// loadHeaderMaxBytes bounds the encoded fields before the entries.
func loadHeaderMaxBytes(origin string) int {
	return headerBytes + uvarintLen(uint64(len(origin))) + len(origin) +
		3*binary.MaxVarintLen64 + 3*binary.MaxVarintLen32
}

func appendLoadReport(b []byte, rep *loadReport) []byte {
	b = appendHeader(b, msgLoad)
	b = appendString(b, rep.origin)
	b = binary.AppendUvarint(b, rep.epoch)
	b = binary.AppendUvarint(b, rep.seq)
	b = binary.AppendVarint(b, rep.sentAt)
	b = binary.AppendUvarint(b, uint64(rep.lo))
	b = binary.AppendUvarint(b, uint64(rep.hi))
	b = binary.AppendUvarint(b, uint64(len(rep.entries)))
	next := uint64(rep.lo)
	for _, e := range rep.entries {
		b = binary.AppendUvarint(b, uint64(e.Worker)-next)
		b = binary.AppendVarint(b, e.InFlight)
		next = uint64(e.Worker) + 1
	}
	return b
}

func decodeLoadReport(r *reader) (loadReport, error) {
	rep := loadReport{
		origin: r.str(),
		epoch:  r.uvarint(),
		seq:    r.uvarint(),
		sentAt: r.varint(),
		lo:     r.uint32v(),
		hi:     r.uint32v(),
	}
	if r.err() == nil && rep.lo > rep.hi {
		r.fail("range [%d, %d] reversed", rep.lo, rep.hi)
	}
	n := r.count(loadEntryMinBytes)
	if r.err() != nil {
		return loadReport{}, r.err()
	}
	rep.entries = make([]WorkerLoad, 0, n)
	next := uint64(rep.lo) // smallest worker id the next entry may have
	for range n {
		gap, load := r.uvarint(), r.varint()
		// Compared before adding, so a forged gap cannot wrap around.
		if r.err() == nil && (next > uint64(rep.hi) || gap > uint64(rep.hi)-next) {
			r.fail("worker %d+%d outside [%d, %d]", next, gap, rep.lo, rep.hi)
		}
		if r.err() != nil {
			return loadReport{}, r.err()
		}
		w := next + gap
		rep.entries = append(rep.entries, WorkerLoad{Worker: uint32(w), InFlight: load})
		next = w + 1
	}
	return rep, r.end()
}

// normalizeLoads sorts loads by worker, drops zero counts and keeps the
// first of duplicate workers, in place.
func normalizeLoads(loads []WorkerLoad) []WorkerLoad {
	slices.SortStableFunc(loads, func(a, b WorkerLoad) int { return cmp.Compare(a.Worker, b.Worker) })
	out := loads[:0]
	for i, l := range loads {
		if l.InFlight == 0 || (i > 0 && loads[i-1].Worker == l.Worker) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// packLoadReport splits a report of sorted, non-zero loads into packets of
// at most maxBytes each whose ranges tile [0, MaxUint32]. It always returns
// at least one packet: an empty report still refreshes the origin.
func packLoadReport(base loadReport, loads []WorkerLoad, maxBytes int) [][]byte {
	budget := maxBytes - loadHeaderMaxBytes(base.origin)
	var pkts [][]byte
	lo := uint32(0)
	for {
		n := loadsThatFit(loads, lo, budget)
		rep := base
		rep.lo, rep.hi, rep.entries = lo, math.MaxUint32, loads[:n]
		if n < len(loads) {
			rep.hi = loads[n].Worker - 1
		}
		pkts = append(pkts, appendLoadReport(make([]byte, 0, maxBytes), &rep))
		if n == len(loads) {
			return pkts
		}
		lo, loads = loads[n].Worker, loads[n:]
	}
}

// loadsThatFit counts the leading entries whose encoding fits budget bytes,
// at least one so that packing always progresses.
func loadsThatFit(loads []WorkerLoad, lo uint32, budget int) int {
	used, next := 0, uint64(lo)
	for i, l := range loads {
		used += uvarintLen(uint64(l.Worker)-next) + varintLen(l.InFlight)
		if used > budget && i > 0 {
			return i
		}
		next = uint64(l.Worker) + 1
	}
	return len(loads)
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}
