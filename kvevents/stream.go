package kvevents

import (
	"errors"

	"github.com/zeebo/xxh3"
)

// Stats counts what happened to one worker's stream. A reset (Lost, Rewinds,
// Malformed) emptied the set: what it holds after is true but may be
// incomplete until the engine stores its blocks again.
type Stats struct {
	Batches   uint64 // batches applied
	Live      uint64 // of which as they were published, not from the replay
	Events    uint64 // events applied
	Gaps      uint64 // gaps seen on the live stream (joining late counts)
	Repaired  uint64 // gaps filled whole from the replay socket
	Lost      uint64 // gaps the replay could not fill
	Rewinds   uint64 // sequences that went back: the engine restarted
	Malformed uint64 // batches that did not decode
	Orphans   uint64 // stored events that followed an unknown block
	Refused   uint64 // stored events refused: set full or another block size
	// Followed counts the batches applied from a peer's relay, and
	// PeerResets the times the peer's stream emptied the set (a peer's
	// loss, rewind or malformed batch, which it relays as a fresh start).
	Followed   uint64
	PeerResets uint64
	// Restored counts the snapshots of a peer's set taken in.
	Restored uint64
	// TopicChanges counts live batches under another topic than the one
	// before (each empties the set), Unparsable the messages that were not
	// [topic, sequence, payload].
	TopicChanges, Unparsable uint64
}

// resets is every cause of an emptied set.
func (s Stats) resets() uint64 {
	return s.Lost + s.Rewinds + s.Malformed + s.PeerResets + s.TopicChanges
}

// Stream follows one worker's numbered batches into its Set: in order they
// are applied; a gap waits for a replay; a sequence that rewinds, a batch
// that does not decode and a gap the replay cannot fill empty the set, since
// what it held may no longer be true. Not safe for concurrent use.
type Stream struct {
	set     *Set
	next    uint64 // the sequence number the next batch should carry
	started bool
	pending *numbered // the live batch that revealed a gap, held until the replay ends
	lossy   bool      // the replay under way skipped batches
	// replayed are the numbers a replay applied past the live batch that
	// asked for it (or all it applied, for a catch-up): their live copies,
	// queued on the socket meanwhile, are duplicates, not an engine that
	// went back, which a batch of the same number with another payload is.
	replayed span
	// sums are the payloads' hashes of the batches the replay under way or
	// the last one applied, from sumsFrom on: what a live copy is checked
	// against.
	sums     []uint64
	sumsFrom uint64
	catching bool // a catch-up replay is under way
	stats    Stats
	// epoch counts the times the stream emptied its set and started over
	// (a rewind, a loss, a malformed batch): with next it is the stream's
	// position, which a peer's copy follows (relay.go).
	epoch uint32
	// fresh says the set was emptied by the stream since the last batch
	// applied: the next one starts the epoch.
	fresh bool
	// ops collects the set's changes while a batch is applied, and
	// applied, when set, hears them with the batch's position.
	ops     []Op
	applied func(Applied)
}

// Applied is one batch as the stream applied it: its position and the
// changes it made to the set (a peer applying Ops in order holds the same
// set). Fresh says the stream emptied the set just before it: the batch
// starts Epoch, and a peer that missed what came before may begin there.
type Applied struct {
	Epoch uint32
	Seq   uint64
	Fresh bool
	Ops   []Op
}

// span is the numbers from, from+1, ... up to but not including to.
type span struct{ from, to uint64 }

func (r span) has(seq uint64) bool { return seq >= r.from && seq < r.to }

// maxSums bounds the payload hashes kept of one replay: vLLM keeps 10,000
// batches. A live copy past them is taken for a restarted engine's batch,
// which empties the set: never stale, at worst incomplete.
const maxSums = DefaultReplayBatches

type numbered struct {
	seq     uint64
	payload []byte
}

// NewStream follows a worker's batches into set.
func NewStream(set *Set) *Stream { return &Stream{set: set} }

// OnApplied makes fn hear every batch applied from now on; fn must not keep
// Ops past its call.
func (s *Stream) OnApplied(fn func(Applied)) { s.applied = fn }

// Position is the stream's epoch and the sequence number it expects next,
// and whether it has heard any batch since it started over.
func (s *Stream) Position() (epoch uint32, next uint64, started bool) {
	return s.epoch, s.next, s.started
}

// Stats is what the stream has seen so far.
func (s *Stream) Stats() Stats { return s.stats }

// Set is the blocks the worker holds, as far as the stream knows.
func (s *Stream) Set() *Set { return s.set }

// Rejoin readies the stream for a new connection to the engine, which may
// have restarted unseen meanwhile. The set is kept, and the next batch
// tells: one that follows on comes from the same engine; one numbered
// lower, from a restarted one, and empties the set; one past a gap asks for
// a replay of what was missed.
func (s *Stream) Rejoin() {
	s.pending, s.lossy, s.replayed = nil, false, span{}
	s.sums, s.catching = s.sums[:0], false
}

// CatchUp begins a replay right after the stream joined, before any live
// batch, so the set holds what the engine kept without waiting for its
// next batch: Replayed for each batch, then EndCatchUp. It replays from
// where the stream is (the start, for one that never took a batch); a
// stream holding a live batch for a replay already has nothing to catch up,
// and CatchUp says so.
func (s *Stream) CatchUp() (from uint64, ok bool) {
	if s.pending != nil {
		return 0, false
	}
	s.catching, s.sums, s.sumsFrom = true, s.sums[:0], s.next
	return s.next, true
}

// EndCatchUp ends a catch-up: the batches it applied count as a late join's
// gap, repaired (or lost, if the engine no longer kept its first ones), and
// their live copies, which the socket queued meanwhile, are told from a
// restarted engine's batches by their payloads. A catch-up that got nothing
// leaves the stream as it was: its first live batch asks for the replay.
func (s *Stream) EndCatchUp() {
	if !s.catching {
		return
	}
	s.catching = false
	if len(s.sums) == 0 {
		return
	}
	s.started = true
	s.stats.Gaps++
	if !s.lossy {
		s.stats.Repaired++
	}
	s.lossy = false
	s.replayed = span{s.sumsFrom, s.next}
}

// Offer takes a live batch. When it shows that batches are missing (the first
// one heard is not the engine's first, or numbers were skipped), Offer holds
// it and says from which number to replay; the caller replays (Replayed for
// each batch, then EndReplay), or calls EndReplay alone when no replay is to
// be had.
func (s *Stream) Offer(seq uint64, payload []byte) (replayFrom uint64, gap bool) {
	if seq >= s.next {
		s.replayed = span{} // the live stream caught up: every copy of a replayed batch came before
	}
	switch {
	case s.started && seq < s.next && s.replayedSame(seq, payload):
		return 0, false // applied from the replay already
	case !s.started && seq > 0, s.started && seq > s.next:
		s.started = true
		s.stats.Gaps++
		s.pending = &numbered{seq, payload}
		s.sums = s.sums[:0]
		return s.next, true
	case s.started && seq < s.next:
		s.stats.Rewinds++
		s.restart()
		s.next = seq
	}
	s.started = true
	s.stats.Live++
	s.apply(seq, payload)
	return 0, false
}

// Replayed takes a batch from the replay socket. Batches already applied are
// skipped; one past a missing number means the engine no longer has what was
// missed.
func (s *Stream) Replayed(seq uint64, payload []byte) {
	switch {
	case seq < s.next:
		return
	case seq > s.next:
		s.lose(seq)
	}
	s.sum(seq, payload)
	s.apply(seq, payload)
}

// sum keeps the hash of a replayed batch's payload, in order.
func (s *Stream) sum(seq uint64, payload []byte) {
	if len(s.sums) == 0 || seq != s.sumsFrom+uint64(len(s.sums)) {
		s.sums, s.sumsFrom = s.sums[:0], seq // a loss restarted the numbers: the earlier ones are gone
	}
	if len(s.sums) < maxSums {
		s.sums = append(s.sums, xxh3.Hash(payload))
	}
}

// replayedSame says whether seq is a batch the last replay applied, with
// this payload.
func (s *Stream) replayedSame(seq uint64, payload []byte) bool {
	if !s.replayed.has(seq) || seq < s.sumsFrom || seq-s.sumsFrom >= uint64(len(s.sums)) {
		return false
	}
	return s.sums[seq-s.sumsFrom] == xxh3.Hash(payload)
}

// EndReplay applies the held live batch: if the replay did not reach it, the
// batches between were lost.
func (s *Stream) EndReplay() {
	p := s.pending
	if p == nil {
		return
	}
	s.pending = nil
	switch {
	case p.seq > s.next:
		s.lose(p.seq)
	case !s.lossy:
		s.stats.Repaired++
	}
	s.lossy = false
	if p.seq >= s.next {
		s.stats.Live++
		s.apply(p.seq, p.payload)
	}
	s.replayed = span{p.seq + 1, s.next}
}

// lose empties the set: the batches from next to seq are gone, and with
// them removals the set never heard of.
func (s *Stream) lose(seq uint64) {
	if !s.lossy {
		s.stats.Lost++
	}
	s.lossy = s.pending != nil || s.catching
	s.restart()
	s.next = seq
}

// restart empties the set and begins a new epoch.
func (s *Stream) restart() {
	s.set.Reset()
	s.epoch++
	s.fresh = true
}

func (s *Stream) apply(seq uint64, payload []byte) {
	s.next = seq + 1
	s.ops = s.ops[:0]
	s.set.Record(&s.ops)
	defer s.set.Record(nil)
	defer s.announce(seq)
	b, err := Decode(payload)
	if err != nil {
		s.stats.Malformed++
		s.restart()
		return
	}
	s.stats.Batches++
	for _, e := range b.Events {
		s.stats.Events++
		switch err := s.set.Apply(e); {
		case errors.Is(err, ErrUnknownParent):
			s.stats.Orphans++
		case err != nil:
			s.stats.Refused++
		}
	}
}

// announce hands the batch just applied, numbered seq, to OnApplied's fn.
func (s *Stream) announce(seq uint64) {
	if s.applied != nil {
		s.applied(Applied{Epoch: s.epoch, Seq: seq, Fresh: s.fresh, Ops: s.ops})
	}
	s.fresh = false
}

// Follow applies (part of) a batch a peer's stream applied (Applied). The
// caller has checked that it follows on (Follows, for its first part).
// Once complete, the stream is where the peer's was after the batch.
func (s *Stream) Follow(a Applied, complete bool) {
	if a.Fresh {
		s.set.Reset()
		s.stats.PeerResets++
	}
	s.set.ApplyOps(a.Ops)
	if !complete {
		return
	}
	s.epoch, s.next, s.started = a.Epoch, a.Seq+1, true
	s.pending, s.replayed = nil, span{}
	s.stats.Batches++
	s.stats.Followed++
}

// Follows says how a peer's batch stands to the stream: next (it follows
// on, or starts a newer epoch afresh), old (already applied, or of an
// older epoch), or neither (batches are missing before it).
func (s *Stream) Follows(a Applied) (next, old bool) {
	switch {
	case s.started && (a.Epoch < s.epoch || a.Epoch == s.epoch && a.Seq < s.next):
		return false, true
	case s.started && a.Epoch == s.epoch && a.Seq == s.next:
		return true, false
	case a.Fresh && (!s.started || a.Epoch > s.epoch):
		return true, false
	case !s.started && a.Epoch == 0 && a.Seq == 0:
		return true, false // the engine's first batch, heard from the start
	}
	return false, false
}

// Restore puts the stream where a peer's snapshot says, its set holding
// the snapshot's content.
func (s *Stream) Restore(snap Snapshot) {
	_ = s.set.Restore(snap.Names, snap.Keys)
	// A live batch held for a replay stays held: EndReplay applies it if
	// the snapshot does not already hold it.
	s.epoch, s.next, s.started = snap.Epoch, snap.Next, true
	s.replayed, s.fresh, s.sums = span{}, false, s.sums[:0]
	s.stats.Restored++
}

// Retopic starts the stream over for another topic: the set is emptied and
// the next batch is taken as the first one heard.
func (s *Stream) Retopic() {
	s.stats.TopicChanges++
	s.restart()
	s.started, s.pending, s.lossy, s.replayed = false, nil, false, span{}
	s.sums = s.sums[:0]
}
