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
// (worker gap, in-flight), both uvarints: the first gap is the worker's
// distance from lo, later ones the number of ids skipped since the previous
// worker, so workers are strictly increasing by construction.
//
// A full report is also the base of the delta reports that follow it
// (loaddelta.go).
type loadReport struct {
	origin     string
	epoch, seq uint64
	sentAt     int64
	lo, hi     uint32
	entries    []WorkerLoad
	// backlog marks a prefill backlog report (msgBacklog): each entry's
	// InFlight is the uncached prompt bytes the origin's requests still
	// wait on, not a count of requests.
	backlog bool
}

// loadEntryMinBytes is the smallest encoding of one entry.
const loadEntryMinBytes = 2

// loadHeaderMaxBytes bounds the encoded fields before the entries.
func loadHeaderMaxBytes(origin string) int {
	return headerBytes + uvarintLen(uint64(len(origin))) + len(origin) +
		3*binary.MaxVarintLen64 + 3*binary.MaxVarintLen32
}

func appendLoadReport(b []byte, rep *loadReport) []byte {
	typ := msgLoad
	if rep.backlog {
		typ = msgBacklog
	}
	b = appendHeader(b, typ)
	b = appendString(b, rep.origin)
	b = binary.AppendUvarint(b, rep.epoch)
	b = binary.AppendUvarint(b, rep.seq)
	b = binary.AppendVarint(b, rep.sentAt)
	b = binary.AppendUvarint(b, uint64(rep.lo))
	b = binary.AppendUvarint(b, uint64(rep.hi))
	return appendLoadEntries(b, rep.entries, uint64(rep.lo))
}

// appendLoadEntries appends the count and the (worker gap, in-flight)
// entries shared by full and delta reports.
func appendLoadEntries(b []byte, entries []WorkerLoad, next uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(e.Worker)-next)
		b = binary.AppendUvarint(b, uint64(e.InFlight))
		next = uint64(e.Worker) + 1
	}
	return b
}

func decodeLoadReport(r *reader) (loadReport, error) { return decodeReport(r, false) }

// decodeReport decodes a load report, or a backlog report when backlog.
func decodeReport(r *reader, backlog bool) (loadReport, error) {
	rep := loadReport{
		backlog: backlog,
		origin:  r.str(),
		epoch:   r.uvarint(),
		seq:     r.uvarint(),
		sentAt:  r.varint(),
		lo:      r.uint32v(),
		hi:      r.uint32v(),
	}
	if r.err() == nil && rep.lo > rep.hi {
		r.fail("range [%d, %d] reversed", rep.lo, rep.hi)
	}
	bound := uint64(maxInFlight)
	if backlog {
		bound = maxBacklog
	}
	rep.entries = readEntries(r, rep.lo, rep.hi, bound)
	if r.err() != nil {
		return loadReport{}, r.err()
	}
	return rep, r.end()
}

// maxInFlight bounds one origin's count for one worker. No engine holds a
// trillion requests; the bound keeps a forged count from overflowing the
// sums a receiver keeps over every origin.
const maxInFlight = 1 << 40

// maxBacklog bounds one origin's prefill backlog for one worker, in bytes,
// for the same reason.
const maxBacklog = 1 << 50

// readLoadEntries decodes the entries of a report whose workers lie in
// [lo, hi]. They come out strictly increasing by construction, each count
// in [0, maxInFlight]; nil after a failure, which r then holds.
func readLoadEntries(r *reader, lo, hi uint32) []WorkerLoad {
	return readEntries(r, lo, hi, maxInFlight)
}

// readEntries is readLoadEntries with each value in [0, bound].
func readEntries(r *reader, lo, hi uint32, bound uint64) []WorkerLoad {
	n := r.count(loadEntryMinBytes)
	if r.err() != nil {
		return nil
	}
	entries := make([]WorkerLoad, 0, n)
	next := uint64(lo) // smallest worker id the next entry may have
	for range n {
		gap, load := r.uvarint(), r.uvarint()
		// Compared before adding, so a forged gap cannot wrap around.
		if r.err() == nil && (next > uint64(hi) || gap > uint64(hi)-next) {
			r.fail("worker %d+%d outside [%d, %d]", next, gap, lo, hi)
		}
		if r.err() == nil && load > bound {
			r.fail("value %d over %d", load, bound)
		}
		if r.err() != nil {
			return nil
		}
		w := next + gap
		entries = append(entries, WorkerLoad{Worker: uint32(w), InFlight: int64(load)})
		next = w + 1
	}
	return entries
}

// normalizeLoads sorts loads by worker, drops counts that are not positive
// (a count below zero is a caller's bug; peers refuse one) and keeps the
// first of duplicate workers, in place.
func normalizeLoads(loads []WorkerLoad) []WorkerLoad {
	slices.SortStableFunc(loads, func(a, b WorkerLoad) int { return cmp.Compare(a.Worker, b.Worker) })
	out := loads[:0]
	for i, l := range loads {
		if l.InFlight <= 0 || (i > 0 && loads[i-1].Worker == l.Worker) {
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
		used += uvarintLen(uint64(l.Worker)-next) + uvarintLen(uint64(l.InFlight))
		if used > budget && i > 0 {
			return i
		}
		next = uint64(l.Worker) + 1
	}
	return len(loads)
}
