package loadsync

import (
	"sync/atomic"
	"time"
)

// State is one replica's side of the load and ownership gossip, as a pure
// state machine: it is driven by Tick, Receive, Owned and Forget, returns
// the packets to send, and hands what it learns to the Config callbacks. It
// opens no socket, starts no goroutine and reads no clock.
//
// All methods are safe for concurrent use. Each part of the gossip below
// has a lock of its own, so Owned on the request path never waits for a
// load report being made or merged, nor a merge for a report.
type State struct {
	cfg   Config
	meta  atomic.Pointer[[]byte]
	stats counters

	reports  *reporter     // this replica's load reports
	peers    *peerView     // what the peers' load reports say
	digests  *digests      // the ownership facts, queued and learned
	verdicts *verdicts     // this replica's verdicts and the peers'
	calibs   *calibrations // judgements of predicted hits, this replica's and the peers'
	queues   queueGossip   // admission queue reports, ours and the peers'
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
		cfg:    cfg,
		queues: newQueueGossip(cfg),
	}
	s.peers = newPeerView(&s.cfg, &s.stats)
	s.digests = newDigests(&s.cfg, &s.stats)
	s.verdicts = &verdicts{view: newVerdictView(cfg.LoadTTL, cfg.OnVerdicts), cfg: &s.cfg, stats: &s.stats}
	s.calibs = &calibrations{cfg: &s.cfg, stats: &s.stats}
	s.reports = &reporter{cfg: &s.cfg, stats: &s.stats, calibs: s.calibs}
	s.meta.Store(&meta)
	return s, nil
}

// Config returns the configuration with defaults filled in.
func (s *State) Config() Config { return s.cfg }

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
			err = s.peers.receiveLoad(&r, now)
		case msgLoadDelta:
			err = s.peers.receiveLoadDelta(&r, now)
		case msgDigest:
			err = s.digests.receive(&r)
		case msgVerdicts:
			err = s.verdicts.receive(&r, now)
		case msgQueues:
			err = s.receiveQueues(&r, now)
		case msgCalibrations:
			err = s.calibs.receive(&r)
		case msgCounted:
			err = s.receiveCounted(&r)
		case msgBacklog:
			err = s.peers.receiveBacklog(&r, now)
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

// Expire drops the contribution of every origin not heard from within
// LoadTTL before now. Tick and Receive do this too.
func (s *State) Expire(now time.Time) {
	s.verdicts.expire(now)
	s.queues.tick(now)
	s.peers.expire(now)
}

// Forget drops origin's load and verdicts at once, for a peer that
// memberlist reports as left or dead. Its late packets are ignored; a newer
// report (a peer wrongly declared dead, or restarted) brings it back.
func (s *State) Forget(origin string) {
	s.queues.forget(origin)
	s.verdicts.forget(origin)
	s.peers.forget(origin)
}

// Remote returns the sum of the other live replicas' latest counts for
// worker: the part of its merged load this replica did not cause.
func (s *State) Remote(worker uint32) int64 { return s.peers.remote(worker) }

// Origins describes every live peer whose reports are held, sorted by name,
// with ages measured at now.
func (s *State) Origins(now time.Time) []OriginStatus { return s.peers.origins(now) }

// Lag summarises the recent receive-minus-send lags of load reports.
func (s *State) Lag() LagSummary { return s.peers.lag() }

// PeerLoads returns every live peer's latest in-flight count per worker
// (non-zero counts only), by origin: the parts of the merged load, for
// the status page. The maps are copies.
func (s *State) PeerLoads() map[string]map[uint32]int64 { return s.peers.peerLoads() }
