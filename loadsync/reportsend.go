package loadsync

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// reporter makes this replica's load reports: it reads the local loads and
// backlogs, and sends them in full, as a cumulative delta on the last full
// report or as a step on the last one, with what goes with them (the
// counted answers, the calibrations, the ownership facts, the verdicts).
type reporter struct {
	mu       sync.Mutex // Tick runs one report at a time, NextTick reads it
	seq      uint64
	nextLoad time.Time    // when the next report is due; zero before the first
	lastLoad time.Time    // when the last report was sent
	loads    []WorkerLoad // as last reported
	prev     []WorkerLoad // as reported before that: this report's step is taken against it
	probe    []WorkerLoad // as read since, to see whether they changed
	// nextProbe is when Tick next looks whether the loads changed: one
	// LoadFlushInterval after the last report, or after the last Tick if
	// that is later.
	nextProbe time.Time
	// base is the counts of the last full report, numbered baseSeq, that
	// the deltas since are taken against, sent at fullAt; sinceFull counts
	// those deltas.
	base      []WorkerLoad
	baseSeq   uint64
	fullAt    time.Time
	sinceFull int
	// lastFull and lastFullReport are the packets of that full report (of
	// the older types and msgReport), sent again with the first report on
	// it, so that a peer that lost one copy still holds the base of the
	// deltas and steps to come.
	lastFull, lastFullReport [][]byte
	diff, step               []WorkerLoad
	// repairedAt is when the last cumulative delta went in a msgReport,
	// calibratedAt when the last calibrations went.
	repairedAt, calibratedAt time.Time
	// backlogUnits is the prefill backlogs as last reported, in
	// backlogUnits, prevUnits as reported before; backlogs the same in
	// bytes, and legacyBacklogs as last sent, at legacyBacklogAt, to the
	// peers of older builds. backlogProbe and unitsProbe are as read since.
	backlogUnits, prevUnits, unitsProbe []WorkerLoad
	backlogs, backlogProbe              []WorkerLoad
	legacyBacklogs                      []WorkerLoad
	legacyBacklogAt                     time.Time
	// counted is the Counted last sent.
	counted Counted
	// legacyPeers says some live peer reads no msgReport (a build of
	// v0.1.0 or before, during an upgrade): reports are then also made in
	// the older types, which Gossip sends only to such peers.
	legacyPeers atomic.Bool

	cfg    *Config
	stats  *counters
	calibs *calibrations
}

// Tick advances the state to now: it expires silent origins and, when a
// report is due (every LoadInterval, or LoadFlushInterval after the last
// one when the loads changed since), returns this replica's load report
// (with it, the prefill backlogs, which placer answers it counts when that
// changed, the calibrations judged since the last report (Judged) and the
// pending ownership facts), on the regular cadence its verdicts (while it
// holds any, and briefly after), and its admission queue report (likewise). The caller sends every packet to every live peer
// (Gossip sends each only to the peers that read its type). Call it every
// LoadFlushInterval (NextTick): more often is harmless. Digests flushed
// while there is no peer are not lost to later joiners: LocalState carries
// them.
func (s *State) Tick(now time.Time) [][]byte {
	s.verdicts.expire(now)
	s.queues.tick(now)
	s.peers.expire(now)
	pkts, sent := s.reports.tick(now, s.digests, s.verdicts)
	if !sent {
		return nil
	}
	// Queue depths go with every report while there are any: a freed slot
	// goes to the tier's longest-waiting request, and how long each has
	// waited is news at every flush (a tenth of a second later, a tier's
	// TTFT p99 at full engines grew from 1.05x one replica's to 1.22x).
	pkts = append(pkts, s.queues.report(s.cfg.Origin, s.cfg.BootEpoch)...)
	s.stats.reportsSent.Add(1)
	return pkts
}

// tick makes the load report due at now, if any (sent false: none), with
// digests' facts and, on the regular cadence, verdicts' report.
func (s *reporter) tick(now time.Time, digests *digests, verdicts *verdicts) (pkts [][]byte, sent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextProbe = now.Add(s.cfg.LoadFlushInterval)
	if early := s.lastLoad.Add(s.cfg.LoadFlushInterval); early.After(now) {
		s.nextProbe = early // the soonest a change may be reported
	}
	regular := s.due(now)
	if !regular && !s.changed(now) {
		return nil, false
	}
	s.lastLoad = now
	pkts = s.loadReport(now, regular, digests.take(now))
	if regular {
		pkts = append(pkts, verdicts.report(s.seq)...)
	}
	return pkts, true
}

// due reports whether a report is due at now and, if so, schedules the next
// one. The schedule is anchored to itself, not to now, with half an
// interval of tolerance, so a ticker's jitter never skips a report.
func (s *reporter) due(now time.Time) bool {
	interval := s.cfg.LoadInterval
	if s.nextLoad.IsZero() {
		s.nextLoad = now
	}
	if now.Before(s.nextLoad.Add(-interval / 2)) {
		return false
	}
	s.nextLoad = s.nextLoad.Add(interval)
	if s.nextLoad.Before(now) {
		s.nextLoad = now.Add(interval) // far behind: do not burst to catch up
	}
	return true
}

// changed reports whether the loads changed since the last report and
// that report is LoadFlushInterval old: a report is due early. If so, the
// next regular report is one LoadInterval later. mu is held.
func (s *reporter) changed(now time.Time) bool {
	if s.cfg.LocalLoads == nil || s.lastLoad.IsZero() || !s.cfg.flushes() ||
		now.Sub(s.lastLoad) < s.cfg.LoadFlushInterval {
		return false
	}
	s.probe = normalizeLoads(s.cfg.LocalLoads(s.probe[:0]))
	if slices.Equal(s.probe, s.loads) && !s.backlogChanged() {
		return false
	}
	// due fires half an interval early (a ticker's jitter): the next
	// regular report comes one whole interval after this one.
	s.nextLoad = now.Add(s.cfg.LoadInterval + s.cfg.LoadInterval/2)
	return true
}

// readBacklogs reads the prefill backlogs into backlogProbe, and in
// backlogUnits into unitsProbe. mu is held.
func (s *reporter) readBacklogs() {
	s.backlogProbe = normalizeLoads(s.cfg.LocalBacklogs(s.backlogProbe[:0]))
	s.unitsProbe = s.unitsProbe[:0]
	for _, b := range s.backlogProbe {
		s.unitsProbe = append(s.unitsProbe, WorkerLoad{Worker: b.Worker, InFlight: backlogUnits(b.InFlight)})
	}
}

// backlogChanged reports whether the prefill backlogs changed since they
// were last reported, as reports carry them (in backlogUnits). mu is
// held.
func (s *reporter) backlogChanged() bool {
	if s.cfg.LocalBacklogs == nil {
		return false
	}
	s.readBacklogs()
	return !slices.Equal(s.unitsProbe, s.backlogUnits)
}

// NextTick is when Tick may next have a report to send, for drivers on
// virtual time: LoadFlushInterval after the last Tick (a report if the
// loads changed by then), or the next regular report if sooner. It is the
// zero time before the first Tick.
func (s *State) NextTick() time.Time { return s.reports.nextTick() }

func (s *reporter) nextTick() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nextProbe.IsZero() || !s.cfg.flushes() {
		return s.nextLoad
	}
	return minTime(s.nextLoad, s.nextProbe)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// report is what one load report says, read once and then encoded for
// each kind of peer.
type report struct {
	reportHeader
	// regular is a report on the regular cadence, not a flush.
	regular bool
	// full makes the loads a new full report, the base of the deltas
	// and steps after it.
	full    bool
	counted *Counted // what it counts, when that changed
	calibs  []Calibration
	facts   []Fact // the ownership facts that go with it
}

// loadReport reads this tick's report and encodes it with this tick's
// ownership facts: a msgReport for the peers that read it and, while some
// peer does not, the older types. mu is held.
func (s *reporter) loadReport(now time.Time, regular bool, facts [][]Fact) [][]byte {
	s.seq++
	rep := report{reportHeader: reportHeader{origin: s.cfg.Origin, epoch: s.cfg.BootEpoch, seq: s.seq, sentAt: now.UnixNano()},
		regular: regular}
	if s.cfg.CountedAnswers != nil {
		rep.counted = s.countedChanged(s.cfg.CountedAnswers())
	}
	s.prev = append(s.prev[:0], s.loads...)
	if s.cfg.LocalLoads != nil {
		s.loads = normalizeLoads(s.cfg.LocalLoads(s.loads[:0]))
	}
	s.prevUnits = append(s.prevUnits[:0], s.backlogUnits...)
	if s.cfg.LocalBacklogs != nil {
		s.readBacklogs()
		s.backlogs = append(s.backlogs[:0], s.backlogProbe...)
		s.backlogUnits = append(s.backlogUnits[:0], s.unitsProbe...)
	}
	if rep.full = s.fullNow(now); rep.full {
		s.base, s.baseSeq, s.fullAt, s.sinceFull = append(s.base[:0], s.loads...), s.seq, now, 0
		s.stats.fullReportsSent.Add(1)
	} else {
		s.sinceFull++
	}
	if s.calibratedAt.IsZero() || now.Sub(s.calibratedAt)+s.cfg.LoadFlushInterval/2 >= s.cfg.LoadInterval {
		// Once an interval: a worker judged several times then is sent
		// once, and a flush carries no section for one answer.
		s.calibratedAt = now
		rep.calibs = s.calibs.take()
	}
	rep.facts = slices.Concat(facts...)
	pkts := s.encodeReport(&rep)
	if s.legacyPeers.Load() {
		pkts = append(pkts, s.legacyReport(&rep)...)
		pkts = append(pkts, digestPackets(facts)...)
	}
	return pkts
}

// countedChanged returns c when it differs from the Counted last sent, and
// remembers it; nil otherwise. mu is held.
func (s *reporter) countedChanged(c Counted) *Counted {
	if c.equal(s.counted) {
		return nil
	}
	s.counted = Counted{Through: c.Through, Also: append(s.counted.Also[:0], c.Also...)}
	return &Counted{Through: c.Through, Also: slices.Clone(c.Also)}
}

// fullNow reports whether this report must be full: there is no base yet,
// FullReportInterval has passed since the last full one, or the delta on
// the base (left in s.diff) would be no smaller than the full report or
// would not fit one packet. mu is held.
func (s *reporter) fullNow(now time.Time) bool {
	if s.baseSeq == 0 || s.fullDue(now) {
		return true
	}
	s.diff = loadDiff(s.diff[:0], s.base, s.loads)
	size := loadEntriesBytes(s.diff, 0)
	return size >= loadEntriesBytes(s.loads, 0) || size > s.cfg.MaxPacketBytes-loadHeaderMaxBytes(s.cfg.Origin)
}

// fullDue reports whether the next report must be full: FullReportInterval
// has passed since the last full one, within half a LoadInterval (a report
// on the regular cadence that falls due then is the full one).
func (s *reporter) fullDue(now time.Time) bool {
	return now.Sub(s.fullAt)+s.cfg.LoadInterval/2 >= s.cfg.FullReportInterval
}

// encodeReport encodes rep as msgReport packets: the full report's, when it
// is one (and again with the first report after it), then the rest, the
// facts filling its last packet: the loads as a step on the previous report
// or a cumulative delta on the full one (loadsSection), the backlogs, what
// it counts and the calibrations. mu is held.
func (s *reporter) encodeReport(rep *report) [][]byte {
	budget := s.cfg.MaxPacketBytes - reportHeaderMaxBytes(s.cfg.Origin) - sectionOverhead
	var pkts [][]byte
	var rest []section
	restHeader := rep.reportHeader
	restHeader.stepsOnly = true // but where it carries a cumulative delta or a full range
	switch {
	case rep.full:
		full := rangeSections(secLoadFull, secLoadFullDense, s.loads, budget)
		full = append(full, rangeSections(secBacklogFull, 0, s.backlogUnits, budget)...)
		s.lastFullReport = packReport(&rep.reportHeader, full, nil, s.cfg.MaxPacketBytes)
		pkts = slices.Clone(s.lastFullReport)
	default:
		if s.sinceFull == 1 {
			pkts = slices.Clone(s.lastFullReport)
		}
		rest = append(rest, s.loadsSection(rep, budget))
		rest = append(rest, s.backlogSections(budget)...)
		if slices.ContainsFunc(rest, saysEpoch) {
			restHeader.stepsOnly = false
		}
	}
	if rep.counted != nil {
		rest = append(rest, section{secCounted, appendCountedBody(nil, *rep.counted)})
	}
	for _, chunk := range chunkCalibrations(rep.calibs, budget) {
		rest = append(rest, section{secCalibrations, appendCalibrationsBody(nil, chunk)})
	}
	if len(rest) > 0 || len(rep.facts) > 0 {
		pkts = append(pkts, packReport(&restHeader, rest, rep.facts, s.cfg.MaxPacketBytes)...)
	}
	return pkts
}

// saysEpoch reports whether a section needs its packet to say the origin's
// epoch: one that starts or repairs what receivers hold (a full range, a
// cumulative delta), rather than stepping on it.
func saysEpoch(s section) bool {
	switch s.kind {
	case secLoadFull, secLoadFullDense, secLoadDelta, secBacklogFull:
		return true
	}
	return false
}

// loadsSection is the loads of a report that is not full: a step on the
// previous report, when it fits; a cumulative delta on the full report
// (s.diff, which fullNow left) on the regular cadence, where the step does
// not fit, and every repairEvery of a busy replica's flushes (its loads
// change at every one, which puts its regular report off). A receiver that
// lost a step is exact again with the next cumulative delta. mu is
// held.
func (s *reporter) loadsSection(rep *report, budget int) section {
	at := time.Unix(0, rep.sentAt)
	if !rep.regular && !s.repairDue(at) {
		s.step = loadDiff(s.step[:0], s.prev, s.loads)
		if loadEntriesBytes(s.step, 0)+maxBackBytes <= budget {
			return section{secLoadStep, appendBack(nil, 1, s.step)}
		}
	}
	s.repairedAt = at
	return section{secLoadDelta, appendBack(nil, s.seq-s.baseSeq, s.diff)}
}

// repairEvery is how often a replica reporting at every flush sends a
// cumulative delta, in LoadIntervals: every second one costs 60 kB/s less
// at 64 replicas x 1,024 workers than every one, and raises the merged
// load's lag p99 from 9 to 30 ms (BENCHMARKS.md, "Gossip budget").
const repairEvery = 2

// repairDue reports whether a cumulative delta is due: repairEvery
// intervals since the last one or the full report, within half a flush
// interval.
func (s *reporter) repairDue(now time.Time) bool {
	return now.Sub(maxTime(s.repairedAt, s.fullAt))+s.cfg.LoadFlushInterval/2 >= repairEvery*s.cfg.LoadInterval
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// maxBackBytes bounds the encoded distance back of a step or delta.
const maxBackBytes = 10

// backlogSections is a step of the backlogs changed since the previous
// report, sent with every report that is not full (empty, it still keeps
// the peers' view of them fresh), or the full backlogs where the step would
// not fit a packet. mu is held.
func (s *reporter) backlogSections(budget int) []section {
	if s.cfg.LocalBacklogs == nil {
		return nil
	}
	step := loadDiff(nil, s.prevUnits, s.backlogUnits)
	if loadEntriesBytes(step, 0)+maxBackBytes <= budget {
		return []section{{secBacklogStep, appendBack(nil, 1, step)}}
	}
	return rangeSections(secBacklogFull, 0, s.backlogUnits, budget)
}

// SetLegacyPeers says whether some live peer reads no msgReport (a build
// of v0.1.0 or before): while one does, every report is also made in the
// older types, for it. Gossip calls it on every change of membership; a
// State driven by hand needs it only with such peers.
func (s *State) SetLegacyPeers(some bool) { s.reports.legacyPeers.Store(some) }
