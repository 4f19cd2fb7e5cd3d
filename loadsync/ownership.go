package loadsync

import (
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// learnChunk is how many learned facts are recorded per lock hold.
const learnChunk = 512

// Owned records a routing decision: worker now holds every block of hashes,
// the request's chain of block hashes from depth 0. Only the deepest block
// and the power-of-two checkpoints are queued for the peers, each with the
// span of prefix it stands for; a fact this replica queued within the last
// half RefreshInterval is skipped, and announced again after that, so the
// peers keep a live conversation's whole prefix fresh. Called on the request
// path; it does not allocate in steady state.
func (s *State) Owned(hashes []uint64, worker uint32) { s.OwnedBeyond(hashes, -1, worker) }

// OwnedBeyond is Owned for a decision that found worker already holding
// hashes[:known+1] (a hit matched at depth known; -1 for a miss). When known
// was the deepest fact of an earlier decision and not a checkpoint, the new
// deepest fact's span covers its stretch again, so known is announced once
// more as superseded (affinity.SpanSuperseded, charged 1): a peer then
// charges the conversation's prefix once, as the engine holds it, not once
// per turn, and an old turn's fact aging out of its index frees one block,
// not a stretch that is still cached.
func (s *State) OwnedBeyond(hashes []uint64, known int, worker uint32) {
	s.digests.owned(hashes, known, worker)
}

// digests is this replica's side of the ownership digests: the facts queued
// for the peers, those recently sent or learned (so none is echoed), and
// the recent ring that LocalState sends a joining peer. Its lock is its
// own: Owned on the request path never waits for a load report.
type digests struct {
	mu      sync.Mutex
	queue   factRing // facts waiting to be sent, oldest first
	known   factSet  // facts recently sent or learned, kept once in the recent ring
	sent    factSet  // facts queued or learned within the last refresh half-interval
	rotated time.Time
	recent  factRing // facts recently made or learned, for LocalState

	cfg   *Config
	stats *counters
}

func newDigests(cfg *Config, stats *counters) *digests {
	return &digests{queue: newFactRing(cfg.DigestQueueFacts), known: newFactSet(cfg.RecentSetFacts),
		sent: newFactSet(cfg.RecentSetFacts), recent: newFactRing(cfg.FullStateFacts), cfg: cfg, stats: stats}
}

// owned is OwnedBeyond.
func (s *digests) owned(hashes []uint64, known int, worker uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if superseded(known, len(hashes)) {
		s.demote(Fact{Hash: hashes[known], Worker: worker, Span: affinity.SpanSuperseded})
	}
	checkpointDepths(len(hashes), func(i, span int) {
		s.offer(Fact{Hash: hashes[i], Worker: worker, Span: uint32(span)})
	})
}

// superseded reports whether the fact at index known, deepest of an earlier
// decision, lies strictly inside the stretch of a chain of n blocks that its
// new deepest fact stands for, and is no checkpoint (whose span never
// changes).
func superseded(known, n int) bool {
	return known >= 0 && known < n-1 && !affinity.IsCheckpoint(known) && known > affinity.LastCheckpointBelow(n-1)
}

// demote queues f, a fact the peers hold with a larger span, whatever was
// queued recently: its new span must reach them. mu is held.
func (s *digests) demote(f Fact) {
	s.stats.factsQueued.Add(1)
	if s.queue.push(f) {
		s.stats.factsDropped.Add(1)
	}
}

// offer queues f unless it was queued within the last half refresh
// interval. The spans are computed before this filter, so a skipped fact's
// blocks are not handed to a deeper one: the peers were charged for them
// when they learned the skipped fact. mu is held.
func (s *digests) offer(f Fact) {
	if !s.sent.addFresh(f) {
		s.stats.factsDeduplicated.Add(1)
		return
	}
	s.stats.factsQueued.Add(1)
	if s.queue.push(f) {
		s.stats.factsDropped.Add(1)
	}
	if s.known.add(f) {
		s.recent.push(f)
	}
}

func (s *digests) receive(r *reader) error {
	facts, err := readFacts(r)
	if err != nil {
		return err
	}
	s.learn(facts)
	return nil
}

// learn marks facts heard from a peer as sent, so that Owned does not echo
// them within the refresh interval, keeps them for LocalState, and hands
// them to OnOwnership.
func (s *digests) learn(facts []Fact) {
	// A full state holds up to FullStateFacts facts: take the lock per
	// chunk so Owned on the request path waits microseconds, not the
	// milliseconds the whole merge takes.
	for chunk := range slices.Chunk(facts, learnChunk) {
		s.mu.Lock()
		for _, f := range chunk {
			s.sent.addFresh(f) // a peer just announced it: no need to echo it
			if s.known.add(f) {
				s.recent.push(f)
			}
		}
		s.mu.Unlock()
	}
	s.stats.factsLearned.Add(uint64(len(facts)))
	if s.cfg.OnOwnership == nil {
		return
	}
	for _, f := range facts {
		s.cfg.OnOwnership(f)
	}
}

// LocalState encodes the most recent ownership facts known here, made or
// learned, for memberlist's TCP push/pull: up to FullStateFacts when a
// replica joins, PushPullFacts for periodic anti-entropy.
//
// The facts come from a ring kept here rather than from the caller's index:
// the ring is bounded, costs O(1) per fact, orders facts by recency across
// all workers, and keeps this package free of the index's types. Facts the
// index has since evicted may be included; at worst the peer routes one
// request to a worker that lost the prefix, and learns the truth from it.
func (s *State) LocalState(join bool) []byte { return s.digests.localState(join) }

func (s *digests) localState(join bool) []byte {
	n := s.cfg.PushPullFacts
	if join {
		n = s.cfg.FullStateFacts
	}
	s.mu.Lock()
	facts := s.recent.newest(make([]Fact, 0, min(n, s.recent.len())), n)
	s.mu.Unlock()
	return appendFacts(make([]byte, 0, headerBytes+5+len(facts)*factMaxBytes), msgFullState, facts)
}

// MergeRemoteState learns the facts of a peer's LocalState. A buffer that
// does not decode changes nothing and returns an error wrapping
// ErrMalformed, ErrVersion or ErrUnexpectedMessage.
func (s *State) MergeRemoteState(buf []byte) error {
	facts, err := decodeFacts(buf, msgFullState)
	if err != nil {
		s.stats.decodeErrors.Add(1)
		return err
	}
	s.digests.learn(facts)
	return nil
}

// take takes this tick's facts from the queue: as many as
// DigestPacketsPerTick digest packets hold, in packet-sized runs.
func (s *digests) take(now time.Time) [][]Fact {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotateSent(now)
	before := s.queue.len()
	runs := takeFacts(&s.queue, s.cfg.MaxPacketBytes, s.cfg.DigestPacketsPerTick)
	s.stats.factsSent.Add(uint64(before - s.queue.len()))
	return runs
}

// rotateSent ages the sent set by one generation every half refresh
// interval, so a fact is skipped for between half an interval and one
// interval after it was queued. mu is held.
func (s *digests) rotateSent(now time.Time) {
	if s.rotated.IsZero() {
		s.rotated = now
	}
	if now.Sub(s.rotated) < s.cfg.RefreshInterval/2 {
		return
	}
	s.rotated = now
	s.sent.rotate()
}
