package loadsync

import (
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
	backlogView                         loadView
	// counted is the Counted last sent.
	counted Counted
	// legacyPeers says some live peer reads no msgReport (a build of
	// v0.1.0 or before, during an upgrade): reports are then also made in
	// the older types, which Gossip sends only to such peers.
	legacyPeers atomic.Bool
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

// takeDigests takes this tick's facts from the queue: as many as
// DigestPacketsPerTick digest packets hold, in packet-sized runs.
func (s *State) takeDigests(now time.Time) [][]Fact {
	s.digestMu.Lock()
	defer s.digestMu.Unlock()
	s.rotateSent(now)
	before := s.queue.len()
	runs := takeFacts(&s.queue, s.cfg.MaxPacketBytes, s.cfg.DigestPacketsPerTick)
	s.stats.factsSent.Add(uint64(before - s.queue.len()))
	return runs
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
// verdicts, queue depths, calibrations or a digest. It never panics; a
// packet that does not decode returns an error wrapping ErrMalformed or
// ErrVersion and changes nothing. A message of a type this build does not
// know (a newer build's) is skipped and counted in Stats.UnknownMessages,
// not as an error: peers announce what they read and are sent no other
// type, so one arrives only from a build that did not check. Old,
// duplicate and own reports are not errors: they are counted in Stats and
// ignored. now is the receiver's clock, used for expiry and lag.
func (s *State) Receive(packet []byte, now time.Time) error {
	typ, r, err := readHeader(packet)
	if err == nil && len(packet) > maxPacketBytes {
		// No peer sends one: it is a stranger's, or corrupt.
		err = malformed("%d bytes, over the %d a packet may hold", len(packet), maxPacketBytes)
	}
	if err == nil && s.cfg.asLegacyBuild && !legacyReadable.has(typ) {
		s.stats.unknownMessages.Add(1)
		return nil
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
		case msgReport:
			err = s.receiveReport(&r, now)
		default:
			s.stats.unknownMessages.Add(1)
			return nil
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
