package loadsync

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// State is one replica's side of the load and ownership gossip, as a pure
// state machine: it is driven by Tick, Receive, Owned and Forget, returns
// the packets to send, and hands what it learns to the Config callbacks. It
// opens no socket, starts no goroutine and reads no clock.
//
// All methods are safe for concurrent use. Load state and ownership state
// are guarded separately, so Owned on the request path never waits for a
// load report being merged.
type State struct {
	cfg   Config
	meta  atomic.Pointer[[]byte]
	stats counters

	loadMu   sync.Mutex
	view     loadView
	lags     lagWindow
	seq      uint64
	nextLoad time.Time    // when the next report is due; zero before the first
	lastLoad time.Time    // when the last report was sent
	loads    []WorkerLoad // as last reported
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
	// lastFull is the packets of that full report, sent again with the
	// first delta on it, so that a peer that lost one copy still holds the
	// base of the deltas to come.
	lastFull [][]byte
	diff     []WorkerLoad
	// backlogs is the prefill backlogs last sent, at backlogAt, into the
	// peers' backlogView; backlogProbe as read since.
	backlogs     []WorkerLoad
	backlogProbe []WorkerLoad
	backlogAt    time.Time
	backlogView  loadView
	// counted is the Counted last sent.
	counted Counted
	// own and withdrawing are this replica's verdicts as last read, and
	// how many more reports announce their withdrawal.
	own         []Verdict
	withdrawing int

	verdictMu sync.Mutex
	verdicts  verdictView // the peers' verdicts

	queues queueGossip // admission queue reports, ours and the peers'

	calibMu sync.Mutex
	calibs  calibrationQueue // judgements of predicted hits since the last report

	digestMu sync.Mutex
	queue    factRing // facts waiting to be sent, oldest first
	known    factSet  // facts recently sent or learned, kept once in the recent ring
	sent     factSet  // facts queued or learned within the last refresh half-interval
	rotated  time.Time
	recent   factRing // facts recently made or learned, for LocalState
	scratch  []Fact
}

// New validates cfg, fills in its defaults and returns a State.
func New(cfg Config) (*State, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	meta, err := encodeMeta(&cfg, cfg.Tags)
	if err != nil {
		return nil, err
	}
	s := &State{
		cfg:         cfg,
		view:        newLoadView(cfg.LoadTTL, cfg.OnRemoteLoad),
		backlogView: newLoadView(cfg.LoadTTL, cfg.OnRemoteBacklog),
		lags:        newLagWindow(cfg.LagSamples),
		queue:       newFactRing(cfg.DigestQueueFacts),
		known:       newFactSet(cfg.RecentSetFacts),
		sent:        newFactSet(cfg.RecentSetFacts),
		recent:      newFactRing(cfg.FullStateFacts),
		verdicts:    newVerdictView(cfg.LoadTTL, cfg.OnVerdicts),
		queues:      newQueueGossip(cfg),
	}
	s.meta.Store(&meta)
	return s, nil
}

// Config returns the configuration with defaults filled in.
func (s *State) Config() Config { return s.cfg }

// Tick advances the state to now: it expires silent origins and, when a
// report is due (every LoadInterval, or LoadFlushInterval after the last
// one when the loads changed since), returns this replica's load report
// (and after it, when that changed, which placer answers it counts),
// its verdicts (while it holds any, and briefly after), its admission queue
// report (likewise), the calibrations judged since the last report (see
// Judged), then the pending ownership digests. The caller sends every
// packet to every live peer. Call it every LoadFlushInterval (NextTick):
// more often is harmless. Digests flushed while there is no peer are not
// lost to later joiners: LocalState carries them.
func (s *State) Tick(now time.Time) [][]byte {
	s.expireVerdicts(now)
	s.queues.tick(now)
	s.loadMu.Lock()
	s.view.expire(now)
	s.backlogView.expire(now)
	s.nextProbe = now.Add(s.cfg.LoadFlushInterval)
	if early := s.lastLoad.Add(s.cfg.LoadFlushInterval); early.After(now) {
		s.nextProbe = early // the soonest a change may be reported
	}
	if !s.due(now) && !s.changed(now) {
		s.loadMu.Unlock()
		return nil
	}
	s.lastLoad = now
	pkts := s.loadReport(now)
	pkts = append(pkts, s.verdictReport(now)...)
	s.loadMu.Unlock()
	pkts = append(pkts, s.queues.report(s.cfg.Origin, s.cfg.BootEpoch)...)
	pkts = append(pkts, s.calibrationReport()...)
	s.stats.reportsSent.Add(1)
	return append(pkts, s.digests(now)...)
}

// due reports whether a report is due at now and, if so, schedules the next
// one. The schedule is anchored to itself, not to now, with half an
// interval of tolerance, so a ticker's jitter never skips a report.
func (s *State) due(now time.Time) bool {
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
// next regular report is one LoadInterval later. loadMu is held.
func (s *State) changed(now time.Time) bool {
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

// backlogChanged reports whether the prefill backlogs changed since they
// were last sent. loadMu is held.
func (s *State) backlogChanged() bool {
	if s.cfg.LocalBacklogs == nil {
		return false
	}
	s.backlogProbe = normalizeLoads(s.cfg.LocalBacklogs(s.backlogProbe[:0]))
	return !slices.Equal(s.backlogProbe, s.backlogs)
}

// backlogReport is the prefill backlog report that goes with a load report
// numbered s.seq: when the backlogs changed since the last one, or with the
// regular report after it (peers expire what they do not hear of again;
// half an interval of tolerance, as due has). loadMu is held.
func (s *State) backlogReport(now time.Time) [][]byte {
	if s.cfg.LocalBacklogs == nil || !s.backlogChanged() && now.Sub(s.backlogAt) < s.cfg.LoadInterval/2 {
		return nil
	}
	s.backlogs, s.backlogProbe = s.backlogProbe, s.backlogs
	s.backlogAt = now
	base := loadReport{origin: s.cfg.Origin, epoch: s.cfg.BootEpoch, seq: s.seq, sentAt: now.UnixNano(), backlog: true}
	return packLoadReport(base, s.backlogs, s.cfg.MaxPacketBytes)
}

// NextTick is when Tick may next have a report to send, for drivers on
// virtual time: LoadFlushInterval after the last Tick (a report if the
// loads changed by then), or the next regular report if sooner. It is the
// zero time before the first Tick.
func (s *State) NextTick() time.Time {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
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

// loadReport returns this tick's load report: a delta against the last
// full report when one is allowed, the full report otherwise. loadMu is
// held.
func (s *State) loadReport(now time.Time) [][]byte {
	s.seq++
	var counted []byte
	if s.cfg.CountedAnswers != nil {
		counted = s.countedReport(s.cfg.CountedAnswers())
	}
	if s.cfg.LocalLoads != nil {
		s.loads = normalizeLoads(s.cfg.LocalLoads(s.loads[:0]))
	}
	var pkts [][]byte
	if pkt := s.deltaReport(now); pkt != nil {
		s.sinceFull++
		if s.sinceFull == 1 {
			pkts = slices.Clone(s.lastFull)
		}
		pkts = append(pkts, pkt)
	} else {
		s.base, s.baseSeq, s.fullAt, s.sinceFull = append(s.base[:0], s.loads...), s.seq, now, 0
		s.stats.fullReportsSent.Add(1)
		base := loadReport{origin: s.cfg.Origin, epoch: s.cfg.BootEpoch, seq: s.seq, sentAt: now.UnixNano()}
		s.lastFull = packLoadReport(base, s.loads, s.cfg.MaxPacketBytes)
		pkts = slices.Clone(s.lastFull)
	}
	if counted != nil {
		pkts = append(pkts, counted)
	}
	return append(pkts, s.backlogReport(now)...)
}

// deltaReport encodes the counts changed since the last full report, or
// returns nil when a full report is due: FullReportInterval has passed
// since the last one, or the delta would be no smaller than the full report
// or would not fit one packet. loadMu is held.
func (s *State) deltaReport(now time.Time) []byte {
	if s.baseSeq == 0 || s.fullDue(now) {
		return nil
	}
	s.diff = loadDiff(s.diff[:0], s.base, s.loads)
	size := loadEntriesBytes(s.diff, 0)
	if size >= loadEntriesBytes(s.loads, 0) || size > s.cfg.MaxPacketBytes-loadHeaderMaxBytes(s.cfg.Origin) {
		return nil
	}
	d := loadDelta{origin: s.cfg.Origin, epoch: s.cfg.BootEpoch, seq: s.seq, base: s.baseSeq,
		sentAt: now.UnixNano(), entries: s.diff}
	return appendLoadDelta(make([]byte, 0, size+loadHeaderMaxBytes(s.cfg.Origin)), &d)
}

// fullDue reports whether the next report must be full: FullReportInterval
// has passed since the last full one, within half a LoadInterval (a report
// on the regular cadence that falls due then is the full one).
func (s *State) fullDue(now time.Time) bool {
	return now.Sub(s.fullAt)+s.cfg.LoadInterval/2 >= s.cfg.FullReportInterval
}

func (s *State) digests(now time.Time) [][]byte {
	s.digestMu.Lock()
	defer s.digestMu.Unlock()
	s.rotateSent(now)
	before := s.queue.len()
	pkts := packDigests(&s.queue, s.cfg.MaxPacketBytes, s.cfg.DigestPacketsPerTick, s.scratch)
	s.stats.factsSent.Add(uint64(before - s.queue.len()))
	return pkts
}

// rotateSent ages the sent set by one generation every half refresh
// interval, so a fact is skipped for between half an interval and one
// interval after it was queued. digestMu is held.
func (s *State) rotateSent(now time.Time) {
	if s.rotated.IsZero() {
		s.rotated = now
	}
	if now.Sub(s.rotated) < s.cfg.RefreshInterval/2 {
		return
	}
	s.rotated = now
	s.sent.rotate()
}

// Receive merges one packet from a peer: a load report (full or delta),
// verdicts, queue depths, calibrations or a digest. It never panics; a packet that does not decode returns an error wrapping
// ErrMalformed, ErrVersion or ErrUnexpectedMessage and changes nothing.
// Old, duplicate and own reports are not errors: they are counted in Stats
// and ignored. now is the receiver's clock, used for expiry and lag.
func (s *State) Receive(packet []byte, now time.Time) error {
	typ, r, err := readHeader(packet)
	if err == nil && len(packet) > maxPacketBytes {
		// No peer sends one: it is a stranger's, or corrupt.
		err = malformed("%d bytes, over the %d a packet may hold", len(packet), maxPacketBytes)
	}
	if err == nil {
		switch typ {
		case msgLoad:
			err = s.receiveLoad(&r, now)
		case msgLoadDelta:
			err = s.receiveLoadDelta(&r, now)
		case msgDigest:
			err = s.receiveDigest(&r)
		case msgVerdicts:
			err = s.receiveVerdicts(&r, now)
		case msgQueues:
			err = s.receiveQueues(&r, now)
		case msgCalibrations:
			err = s.receiveCalibrations(&r)
		case msgCounted:
			err = s.receiveCounted(&r)
		case msgBacklog:
			err = s.receiveBacklog(&r, now)
		default:
			err = fmt.Errorf("%w: type %d", ErrUnexpectedMessage, typ)
		}
	}
	if err != nil {
		s.stats.decodeErrors.Add(1)
	}
	return err
}

func (s *State) receiveLoad(r *reader, now time.Time) error {
	rep, err := decodeLoadReport(r)
	if err != nil {
		return err
	}
	if rep.origin == s.cfg.Origin {
		return nil
	}
	rep.entries = s.knownOnly(rep.entries)
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.view.expire(now)
	s.accepted(s.view.apply(&rep, now), rep.origin, now)
	return nil
}

func (s *State) receiveLoadDelta(r *reader, now time.Time) error {
	d, err := decodeLoadDelta(r)
	if err != nil {
		return err
	}
	if d.origin == s.cfg.Origin {
		return nil
	}
	d.entries = s.knownOnly(d.entries)
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.view.expire(now)
	outcome := s.view.applyDelta(&d, now)
	if outcome == deltaInexact {
		s.stats.deltasInexact.Add(1)
	}
	s.accepted(outcome != deltaStale, d.origin, now)
	return nil
}

// receiveBacklog merges a peer's prefill backlog report, one packet of it,
// as receiveLoad merges its counts.
func (s *State) receiveBacklog(r *reader, now time.Time) error {
	rep, err := decodeReport(r, true)
	if err != nil || rep.origin == s.cfg.Origin {
		return err
	}
	rep.entries = s.knownOnly(rep.entries)
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.backlogView.expire(now)
	s.backlogView.apply(&rep, now)
	return nil
}

// knownOnly keeps, in place, the entries of workers Config.KnownWorker
// knows.
func (s *State) knownOnly(entries []WorkerLoad) []WorkerLoad {
	if s.cfg.KnownWorker == nil {
		return entries
	}
	return slices.DeleteFunc(entries, func(e WorkerLoad) bool { return !s.cfg.KnownWorker(e.Worker) })
}

// accepted counts a load packet and, when it was merged, records the lag
// of origin's view: how old the newest state of the origin is that the view
// now equals. loadMu is held.
func (s *State) accepted(ok bool, origin string, now time.Time) {
	if !ok {
		s.stats.reportsStale.Add(1)
		return
	}
	s.stats.reportsAccepted.Add(1)
	if lag, exact := s.view.lag(origin, now); exact {
		s.lags.record(lag)
	}
}

// Expire drops the contribution of every origin not heard from within
// LoadTTL before now. Tick and Receive do this too.
func (s *State) Expire(now time.Time) {
	s.expireVerdicts(now)
	s.queues.tick(now)
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.view.expire(now)
	s.backlogView.expire(now)
}

func (s *State) expireVerdicts(now time.Time) {
	s.verdictMu.Lock()
	defer s.verdictMu.Unlock()
	s.verdicts.expire(now)
}

// Forget drops origin's load and verdicts at once, for a peer that
// memberlist reports as left or dead. Its late packets are ignored; a newer
// report (a peer wrongly declared dead, or restarted) brings it back.
func (s *State) Forget(origin string) {
	s.queues.forget(origin)
	s.verdictMu.Lock()
	s.verdicts.forget(origin)
	s.verdictMu.Unlock()
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.view.forget(origin)
	s.backlogView.forget(origin)
}

// Remote returns the sum of the other live replicas' latest counts for
// worker: the part of its merged load this replica did not cause.
func (s *State) Remote(worker uint32) int64 {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	return s.view.remote[worker]
}

// Origins describes every live peer whose reports are held, sorted by name,
// with ages measured at now.
func (s *State) Origins(now time.Time) []OriginStatus {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	return s.view.status(now)
}

// Lag summarises the recent receive-minus-send lags of load reports.
func (s *State) Lag() LagSummary {
	s.loadMu.Lock()
	samples, total := s.lags.snapshot()
	s.loadMu.Unlock()
	return summarise(samples, total)
}

// PeerLoads returns every live peer's latest in-flight count per worker
// (non-zero counts only), by origin: the parts of the merged load, for
// the status page. The maps are copies.
func (s *State) PeerLoads() map[string]map[uint32]int64 {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	out := make(map[string]map[uint32]int64, len(s.view.origins))
	for name, o := range s.view.origins {
		if !o.gone {
			out[name] = maps.Clone(o.loads)
		}
	}
	return out
}
