package loadsync

import (
	"encoding/binary"
	"math"
)

// loadDelta is a delta load report: the origin's counts, as of seq, of every
// worker whose count differs from the full report numbered base (zero for a
// worker that left it). It is cumulative: each delta carries every change
// since the base, not since the previous delta, so a receiver that holds the
// base learns the origin's exact counts from any one delta, whichever
// deltas before it were lost or arrive late. Only a lost full report leaves
// a receiver inexact, until the next one (FullReportInterval).
//
// Layout after the header: origin (string), epoch, seq, seq - base
// (uvarints), sentAt (signed varint, unix ns), count (uvarint), then count
// entries of (worker gap, in-flight) as in a full report, the first gap
// counted from worker 0. A delta is always one packet.
type loadDelta struct {
	origin     string
	epoch, seq uint64
	base       uint64
	sentAt     int64
	entries    []WorkerLoad
}

func appendLoadDelta(b []byte, d *loadDelta) []byte {
	b = appendHeader(b, msgLoadDelta)
	b = appendString(b, d.origin)
	b = binary.AppendUvarint(b, d.epoch)
	b = binary.AppendUvarint(b, d.seq)
	b = binary.AppendUvarint(b, d.seq-d.base)
	b = binary.AppendVarint(b, d.sentAt)
	return appendLoadEntries(b, d.entries, 0)
}

func decodeLoadDelta(r *reader) (loadDelta, error) {
	d := loadDelta{origin: r.str(), epoch: r.uvarint(), seq: r.uvarint()}
	back := r.uvarint()
	d.sentAt = r.varint()
	if r.err() == nil && (back == 0 || back > d.seq) {
		// A delta follows its base: seq - base is at least 1 and the
		// base is a sequence number, at least 1.
		r.fail("base %d reports before seq %d", back, d.seq)
	}
	d.base = d.seq - back
	d.entries = readLoadEntries(r, 0, math.MaxUint32)
	if r.err() != nil {
		return loadDelta{}, r.err()
	}
	return d, r.end()
}

// loadDiff appends to dst, sorted by worker, the entries of cur that differ
// from base and a zero for each worker of base missing from cur. Both are
// sorted and hold non-zero counts only.
func loadDiff(dst, base, cur []WorkerLoad) []WorkerLoad {
	i, j := 0, 0
	for i < len(base) || j < len(cur) {
		switch {
		case j == len(cur) || i < len(base) && base[i].Worker < cur[j].Worker:
			dst = append(dst, WorkerLoad{Worker: base[i].Worker})
			i++
		case i == len(base) || cur[j].Worker < base[i].Worker:
			dst = append(dst, cur[j])
			j++
		default:
			if base[i].InFlight != cur[j].InFlight {
				dst = append(dst, cur[j])
			}
			i, j = i+1, j+1
		}
	}
	return dst
}

// loadEntriesBytes is the encoded size of entries counted from worker next.
func loadEntriesBytes(entries []WorkerLoad, next uint64) int {
	n := uvarintLen(uint64(len(entries)))
	for _, e := range entries {
		n += uvarintLen(uint64(e.Worker)-next) + uvarintLen(uint64(e.InFlight))
		next = uint64(e.Worker) + 1
	}
	return n
}
