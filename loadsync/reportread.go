package loadsync

import (
	"math"
	"time"
)

// reportPacket is one decoded msgReport packet: its header and the sections
// this build knows. Every section is decoded before any is applied, so that
// a packet that does not decode changes nothing.
type reportPacket struct {
	reportHeader
	sinceEpoch          int64 // sentAt, in microseconds after the epoch
	fulls, backlogFulls []loadReport
	delta, step         *loadDelta // step: base is the report it follows
	backlogStep         *loadDelta
	counted             *Counted
	calibs              []Calibration
	facts               []Fact
}

func decodeReportPacket(r *reader) (reportPacket, error) {
	p := reportPacket{reportHeader: reportHeader{origin: r.str(), epoch: r.uvarint(), seq: r.uvarint()}}
	p.sinceEpoch = r.varint()
	p.sentAt = (int64(p.epoch)/1e3 + p.sinceEpoch) * 1e3
	for r.err() == nil && r.remaining() > 0 {
		kind, n := r.byte(), r.uvarint()
		if r.err() == nil && n > uint64(r.remaining()) {
			r.fail("section of %d bytes", n)
		}
		if r.err() != nil {
			break
		}
		body := reader{buf: r.buf[:r.off+int(n)], off: r.off}
		r.off += int(n)
		if err := p.section(kind, &body); err != nil {
			return reportPacket{}, err
		}
	}
	if r.err() == nil && p.seq == 0 {
		r.fail("report numbered 0")
	}
	return p, r.err()
}

// section decodes one section into p; a kind this build does not know is
// skipped.
func (p *reportPacket) section(kind byte, r *reader) error {
	switch kind {
	case secLoadFull, secLoadFullDense, secBacklogFull:
		p.fullRange(kind, r)
	case secLoadDelta:
		p.delta = p.back(r, maxInFlight, false)
	case secLoadStep:
		p.step = p.back(r, maxInFlight, false)
	case secBacklogStep:
		p.backlogStep = p.back(r, maxBacklog/backlogUnit, true)
	case secCounted:
		c, err := decodeCountedBody(r)
		if err != nil {
			return err
		}
		p.counted = &c
	case secCalibrations:
		cs, err := decodeCalibrationsBody(r)
		if err != nil {
			return err
		}
		p.calibs = append(p.calibs, cs...)
	case secFacts:
		facts, err := readFactsBody(r)
		if err != nil {
			return err
		}
		p.facts = append(p.facts, facts...)
	}
	return r.end()
}

// fullRange decodes one range of a full report, of the loads or of the
// backlogs.
func (p *reportPacket) fullRange(kind byte, r *reader) {
	rep := loadReport{origin: p.origin, epoch: p.epoch, seq: p.seq, sentAt: p.sentAt, backlog: kind == secBacklogFull}
	switch kind {
	case secLoadFullDense:
		rep.lo, rep.hi, rep.entries = readDenseRange(r, maxInFlight)
	case secLoadFull:
		rep.lo, rep.hi, rep.entries = readSparseRange(r, maxInFlight)
	default:
		rep.lo, rep.hi, rep.entries = readSparseRange(r, maxBacklog/backlogUnit)
		inBytes(rep.entries)
	}
	if r.err() != nil {
		return
	}
	if rep.backlog {
		p.backlogFulls = append(p.backlogFulls, rep)
	} else {
		p.fulls = append(p.fulls, rep)
	}
}

// back decodes a step or a cumulative delta: the distance back to the
// report it is taken against, then entries of values at most bound (in
// backlog units when backlog).
func (p *reportPacket) back(r *reader, bound uint64, backlog bool) *loadDelta {
	back := r.uvarint()
	if r.err() == nil && (back == 0 || back >= p.seq) {
		r.fail("report %d taken against %d back", p.seq, back)
	}
	entries := readEntries(r, 0, math.MaxUint32, bound)
	if r.err() != nil {
		return nil
	}
	if backlog {
		inBytes(entries)
	}
	return &loadDelta{origin: p.origin, epoch: p.epoch, seq: p.seq, base: p.seq - back, sentAt: p.sentAt, entries: entries}
}

// inBytes turns backlog units into bytes, in place.
func inBytes(entries []WorkerLoad) {
	for i := range entries {
		entries[i].InFlight *= backlogUnit
	}
}

// receiveReport merges one msgReport packet: the loads first, then what the
// placer is told, the calibrations and the facts, as the older types
// arrived in that order.
func (s *State) receiveReport(r *reader, now time.Time) error {
	p, err := decodeReportPacket(r)
	if err != nil || p.origin == s.cfg.Origin {
		return err
	}
	s.peers.mergeReportLoads(&p, now)
	if p.counted != nil {
		s.heardCounted(p.origin, *p.counted)
	}
	s.calibs.calibrated(p.origin, p.calibs)
	if len(p.facts) > 0 {
		s.digests.learn(p.facts)
	}
	return nil
}
