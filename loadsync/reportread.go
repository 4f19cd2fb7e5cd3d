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
	s.mergeReportLoads(&p, now)
	if p.counted != nil {
		s.heardCounted(p.origin, *p.counted)
	}
	s.calibrated(p.origin, p.calibs)
	if len(p.facts) > 0 {
		s.learn(p.facts)
	}
	return nil
}

// resolve gives a packet that says epoch 0 the epoch held for its origin
// (a step applies on what the origin's full report began), and its
// sections that epoch and their send time. false: the origin is not held,
// and a step on nothing is dropped. loadMu is held.
func (s *State) resolve(p *reportPacket) bool {
	if p.epoch == 0 {
		o := s.view.origins[p.origin]
		if o == nil {
			return false
		}
		p.epoch = o.epoch
		p.sentAt = (int64(p.epoch)/1e3 + p.sinceEpoch) * 1e3
	}
	for _, d := range []*loadDelta{p.delta, p.step, p.backlogStep} {
		if d != nil {
			d.epoch, d.sentAt = p.epoch, p.sentAt
		}
	}
	for _, reps := range [][]loadReport{p.fulls, p.backlogFulls} {
		for i := range reps {
			reps[i].epoch, reps[i].sentAt = p.epoch, p.sentAt
		}
	}
	return true
}

// mergeReportLoads merges the packet's loads and backlogs into the views.
func (s *State) mergeReportLoads(p *reportPacket, now time.Time) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.view.expire(now)
	s.backlogView.expire(now)
	if !s.resolve(p) {
		s.stats.reportsStale.Add(1)
		return
	}
	merged, any := false, false
	for i := range p.fulls {
		p.fulls[i].entries = s.knownOnly(p.fulls[i].entries)
		merged = s.view.apply(&p.fulls[i], now) || merged
		any = true
	}
	if p.delta != nil {
		merged = s.mergeDelta(p.delta, s.view.applyDelta, now) || merged
		any = true
	}
	if p.step != nil {
		merged = s.mergeDelta(p.step, s.view.applyStep, now) || merged
		any = true
	}
	if any {
		s.accepted(merged, p.origin, now)
	}
	s.mergeReportBacklogs(p, now)
}

// mergeDelta merges a cumulative delta or a step of known workers with
// apply and reports whether it was news. loadMu is held.
func (s *State) mergeDelta(d *loadDelta, apply func(*loadDelta, time.Time) deltaOutcome, now time.Time) bool {
	d.entries = s.knownOnly(d.entries)
	outcome := apply(d, now)
	if outcome == deltaInexact {
		s.stats.deltasInexact.Add(1)
	}
	return outcome != deltaStale
}

// mergeReportBacklogs merges the packet's backlogs. loadMu is held.
func (s *State) mergeReportBacklogs(p *reportPacket, now time.Time) {
	for i := range p.backlogFulls {
		p.backlogFulls[i].entries = s.knownOnly(p.backlogFulls[i].entries)
		s.backlogView.apply(&p.backlogFulls[i], now)
	}
	if p.backlogStep != nil {
		p.backlogStep.entries = s.knownOnly(p.backlogStep.entries)
		s.backlogView.applyStep(p.backlogStep, now)
	}
}
