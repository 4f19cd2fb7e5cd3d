package loadsync

import (
	"encoding/binary"
	"math"
)

// A report (msgReport) is everything an origin tells its peers with one load
// report, in one packet where it fits: the loads (a step of the counts
// changed since its previous report, a cumulative delta against its last
// full report, or the full report), its prefill backlogs, the placer's
// answers it counts and its calibrations. The older types carried each in a
// packet of its own with a header of its own, and sent every flush the
// counts changed since the last full report; a step sends only what changed
// since the previous flush (BENCHMARKS.md, "Gossip budget", measures each
// part).
//
// Layout after the header: origin (string), epoch, seq (uvarints), sentAt
// (signed varint: microseconds after the epoch, the epoch being nanoseconds:
// 5 bytes in a day's run where an absolute time takes 9). A packet whose
// loads are a step, or that carries no loads, says epoch 0: the epoch of the
// origin's report the receiver holds (its full reports and cumulative deltas
// say it in full, and a step applies only on what they began). Then come
// sections to the end of the packet, each a kind byte, a length
// (uvarint) and that many bytes. A reader skips a section of a kind it does
// not know, and the bytes after the fields it knows within one, so that a
// newer build adds sections and fields without a new type.
const (
	// secLoadFull is one range of the full report numbered seq: lo, hi
	// (uvarints), then the non-zero counts as in loadReport.
	secLoadFull byte = 1
	// secLoadFullDense is one range of the full report as a dense run: lo,
	// hi, n (uvarints), then the counts of workers lo to lo+n-1 as 4-bit
	// nibbles, low nibble first, 15 marking a count sent after the nibbles
	// as a uvarint, in order; workers after lo+n-1 up to hi have none. Where
	// most workers are busy (a tier of few replicas, or of many workers
	// each) it is half a sparse range or less.
	secLoadFullDense byte = 2
	// secLoadDelta is a cumulative delta (loadDelta): seq - base
	// (uvarint), then the entries.
	secLoadDelta byte = 3
	// secLoadStep is a step: seq - prev (uvarint), the sequence number of
	// the report it follows, then the entries of the counts that changed
	// since it (zero for a worker that went idle).
	secLoadStep byte = 4
	// secBacklogFull is the prefill backlogs in full, one range of them,
	// laid out as secLoadFull, in backlogUnit bytes rounded up.
	secBacklogFull byte = 5
	// secBacklogStep is the backlogs changed since the previous report,
	// in backlogUnit bytes: seq - prev, then the entries.
	secBacklogStep byte = 6
	// secCounted is a Counted, as appendCounted lays it out after the
	// origin.
	secCounted byte = 7
	// secCalibrations is calibrations, as appendCalibrations lays them
	// out after the origin.
	secCalibrations byte = 8
	// secFacts is ownership facts, as a digest lays them out after its
	// header: they fill the report's last packet rather than a packet of
	// their own.
	secFacts byte = 9
)

// BacklogUnit is the precision at which peers hear a prefill backlog: 256
// bytes of prompt, a block at the default --block-size, rounded up.
// Placement compares backlogs of kilobytes and more, and a coarser value
// changes less often.
const BacklogUnit = 256

const backlogUnit = BacklogUnit

// backlogUnits is bytes of backlog in backlogUnits, rounded up so that a
// worker with any backlog shows some.
func backlogUnits(bytes int64) int64 { return (bytes + backlogUnit - 1) / backlogUnit }

// reportHeader is what every packet of one report repeats.
type reportHeader struct {
	origin     string
	epoch, seq uint64
	sentAt     int64 // unix ns
	// stepsOnly writes the epoch as 0: the packet steps on what the
	// receiver holds. sentAt stays relative to the real epoch.
	stepsOnly bool
}

// reportHeaderMaxBytes bounds an encoded header of origin.
func reportHeaderMaxBytes(origin string) int {
	return headerBytes + uvarintLen(uint64(len(origin))) + len(origin) + 3*binary.MaxVarintLen64
}

func appendReportHeader(b []byte, h *reportHeader) []byte {
	b = appendHeader(b, msgReport)
	b = appendString(b, h.origin)
	epoch := h.epoch
	if h.stepsOnly {
		epoch = 0
	}
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, h.seq)
	return binary.AppendVarint(b, h.sentAt/1e3-int64(h.epoch)/1e3)
}

// section is one encoded section.
type section struct {
	kind byte
	body []byte
}

// sectionOverhead bounds a section's kind and length.
const sectionOverhead = 1 + binary.MaxVarintLen32

func appendSection(b []byte, s section) []byte {
	b = append(b, s.kind)
	b = binary.AppendUvarint(b, uint64(len(s.body)))
	return append(b, s.body...)
}

func (s section) size() int { return 1 + uvarintLen(uint64(len(s.body))) + len(s.body) }

// packReport lays sections out in order into packets of at most maxBytes,
// each led by the header, then facts in as many secFacts sections as they
// take, the first filling the room the sections left; a section never
// spans two packets (those that could not fit one are cut by their makers).
func packReport(h *reportHeader, sections []section, facts []Fact, maxBytes int) [][]byte {
	p := reportPacker{h: h, maxBytes: maxBytes}
	for _, s := range sections {
		p.add(s)
	}
	for len(facts) > 0 {
		p.open()
		n := factsThatFit(facts, maxBytes-len(p.cur)-sectionOverhead-maxFactCountBytes)
		if n == 0 && len(p.cur) > p.header {
			p.pkts, p.cur = append(p.pkts, p.cur), nil
			continue
		}
		n = max(n, 1)
		p.add(section{secFacts, appendFactsBody(nil, facts[:n])})
		facts = facts[n:]
	}
	return p.done()
}

// reportPacker fills packets with sections.
type reportPacker struct {
	h        *reportHeader
	maxBytes int
	pkts     [][]byte
	cur      []byte // the packet being filled, nil before one is opened
	header   int    // the bytes of cur's header
}

// open starts a packet unless one is being filled.
func (p *reportPacker) open() {
	if p.cur == nil {
		p.cur = appendReportHeader(make([]byte, 0, p.maxBytes), p.h)
		p.header = len(p.cur)
	}
}

func (p *reportPacker) add(s section) {
	if p.cur != nil && len(p.cur)+s.size() > p.maxBytes {
		p.pkts, p.cur = append(p.pkts, p.cur), nil
	}
	p.open()
	p.cur = appendSection(p.cur, s)
}

func (p *reportPacker) done() [][]byte {
	p.open()
	return append(p.pkts, p.cur)
}

// factsThatFit counts the leading facts whose encoding fits budget bytes.
func factsThatFit(facts []Fact, budget int) int {
	used := 0
	for i, f := range facts {
		if used += factBytes(f); used > budget {
			return i
		}
	}
	return len(facts)
}

// rangeSections cuts sorted, non-zero entries into sections of kind whose
// ranges tile [0, MaxUint32], each at most budget bytes, choosing for each
// range the smaller of the sparse and, where dense is a kind, the dense
// layout. There is always at least one.
func rangeSections(sparse, dense byte, entries []WorkerLoad, budget int) []section {
	var out []section
	lo := uint32(0)
	for {
		n, useDense := entriesThatFit(entries, lo, budget, dense != 0)
		hi := uint32(math.MaxUint32)
		if n < len(entries) {
			hi = entries[n].Worker - 1
		}
		if useDense {
			out = append(out, section{dense, appendDenseRange(nil, lo, hi, entries[:n])})
		} else {
			out = append(out, section{sparse, appendSparseRange(nil, lo, hi, entries[:n])})
		}
		if n == len(entries) {
			return out
		}
		lo, entries = entries[n].Worker, entries[n:]
	}
}

// entriesThatFit counts the leading entries whose range from lo fits
// budget bytes in the sparse layout or, when allowed, the dense one, at
// least one so that cutting always progresses; and says whether dense is
// the smaller.
func entriesThatFit(entries []WorkerLoad, lo uint32, budget int, denseAllowed bool) (int, bool) {
	fixed := 3 * binary.MaxVarintLen32 // lo, hi, and a count or a run length
	sparse, escapes, next := fixed, 0, uint64(lo)
	for i, e := range entries {
		sparse += uvarintLen(uint64(e.Worker)-next) + uvarintLen(uint64(e.InFlight))
		if e.InFlight >= denseEscape {
			escapes += uvarintLen(uint64(e.InFlight))
		}
		smallest := sparse
		if dense := fixed + (int(uint64(e.Worker)-uint64(lo))+2)/2 + escapes; denseAllowed && dense < smallest {
			smallest = dense
		}
		if smallest > budget && i > 0 {
			return i, denseAllowed && denseSize(entries[:i], lo) < sparseSize(entries[:i], lo)
		}
		next = uint64(e.Worker) + 1
	}
	return len(entries), denseAllowed && denseSize(entries, lo) < sparseSize(entries, lo)
}

func sparseSize(entries []WorkerLoad, lo uint32) int { return loadEntriesBytes(entries, uint64(lo)) }

func denseSize(entries []WorkerLoad, lo uint32) int {
	if len(entries) == 0 {
		return 0
	}
	n := (int(entries[len(entries)-1].Worker-lo) + 2) / 2
	for _, e := range entries {
		if e.InFlight >= denseEscape {
			n += uvarintLen(uint64(e.InFlight))
		}
	}
	return n
}

// denseEscape is the nibble that says "the count follows as a uvarint".
const denseEscape = 15

func appendSparseRange(b []byte, lo, hi uint32, entries []WorkerLoad) []byte {
	b = binary.AppendUvarint(b, uint64(lo))
	b = binary.AppendUvarint(b, uint64(hi))
	return appendLoadEntries(b, entries, uint64(lo))
}

func appendDenseRange(b []byte, lo, hi uint32, entries []WorkerLoad) []byte {
	b = binary.AppendUvarint(b, uint64(lo))
	b = binary.AppendUvarint(b, uint64(hi))
	n := 0
	if len(entries) > 0 {
		n = int(entries[len(entries)-1].Worker-lo) + 1
	}
	b = binary.AppendUvarint(b, uint64(n))
	nibbles := make([]byte, (n+1)/2)
	for _, e := range entries {
		i := int(e.Worker - lo)
		nibbles[i/2] |= byte(min(e.InFlight, denseEscape)) << (4 * (i % 2))
	}
	b = append(b, nibbles...)
	for _, e := range entries {
		if e.InFlight >= denseEscape {
			b = binary.AppendUvarint(b, uint64(e.InFlight))
		}
	}
	return b
}

// readDenseRange decodes a dense range's counts, each at most bound.
func readDenseRange(r *reader, bound uint64) (lo, hi uint32, entries []WorkerLoad) {
	lo, hi = r.uint32v(), r.uint32v()
	n := r.uvarint()
	if r.err() == nil && (lo > hi || n > uint64(hi)-uint64(lo)+1 || (n+1)/2 > uint64(r.remaining())) {
		r.fail("dense run of %d in [%d, %d]", n, lo, hi)
	}
	if r.err() != nil {
		return 0, 0, nil
	}
	nibbles := r.buf[r.off : r.off+int((n+1)/2)]
	r.off += len(nibbles)
	for i := range int(n) {
		c := uint64(nibbles[i/2]>>(4*(i%2))) & 0xf
		if c == denseEscape {
			c = r.uvarint()
		}
		if r.err() == nil && c > bound {
			r.fail("value %d over %d", c, bound)
		}
		if r.err() != nil {
			return 0, 0, nil
		}
		if c > 0 {
			entries = append(entries, WorkerLoad{Worker: lo + uint32(i), InFlight: int64(c)})
		}
	}
	return lo, hi, entries
}

// readSparseRange decodes a sparse range.
func readSparseRange(r *reader, bound uint64) (lo, hi uint32, entries []WorkerLoad) {
	lo, hi = r.uint32v(), r.uint32v()
	if r.err() == nil && lo > hi {
		r.fail("range [%d, %d] reversed", lo, hi)
	}
	if r.err() != nil {
		return 0, 0, nil
	}
	return lo, hi, readEntries(r, lo, hi, bound)
}

// appendBack appends a step's or delta's distance back to the report it is
// taken against, then its entries.
func appendBack(b []byte, back uint64, entries []WorkerLoad) []byte {
	b = binary.AppendUvarint(b, back)
	return appendLoadEntries(b, entries, 0)
}
