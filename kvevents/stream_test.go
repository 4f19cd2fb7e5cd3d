package kvevents

import "testing"

// engine plays one engine's numbered batches: each stores a prompt of its
// own.
type engine struct {
	t       testing.TB
	batches [][]byte
	prompts [][]uint32
}

func newEngine(t testing.TB, n int) *engine {
	e := &engine{t: t}
	for i := range n {
		p := prompt(uint32(1000*i+1), 2)
		e.prompts = append(e.prompts, p)
		e.batches = append(e.batches, encode(t, Keyed, stored(names(EngineHash(100*i)), nil, p)))
	}
	return e
}

func newTestStream() *Stream { return NewStream(NewSet(testBlock, 1000)) }

func (e *engine) held(s *Stream, i int) bool { return matched(s.Set(), e.prompts[i]) == 2 }

func TestBatchesInOrderAreApplied(t *testing.T) {
	e, s := newEngine(t, 3), newTestStream()
	for i := range 3 {
		if _, gap := s.Offer(uint64(i), e.batches[i]); gap {
			t.Fatalf("batch %d in order seen as a gap", i)
		}
	}
	if !e.held(s, 0) || !e.held(s, 2) || s.Stats().Batches != 3 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestAGapIsFilledFromTheReplay(t *testing.T) {
	e, s := newEngine(t, 4), newTestStream()
	s.Offer(0, e.batches[0])
	from, gap := s.Offer(3, e.batches[3])
	if !gap || from != 1 {
		t.Fatalf("Offer(3) after 0 = %d, %v; want a replay from 1", from, gap)
	}
	for i := 1; i <= 3; i++ { // the replay answers up to the newest batch, the held one included
		s.Replayed(uint64(i), e.batches[i])
	}
	s.EndReplay()
	for i := range 4 {
		if !e.held(s, i) {
			t.Errorf("batch %d not held after the replay", i)
		}
	}
	if st := s.Stats(); st.Gaps != 1 || st.Repaired != 1 || st.Lost != 0 || st.Batches != 4 {
		t.Errorf("stats %+v", st)
	}
}

func TestAGapTheReplayCannotFillEmptiesTheSet(t *testing.T) {
	e, s := newEngine(t, 5), newTestStream()
	s.Offer(0, e.batches[0])
	s.Offer(4, e.batches[4])
	s.Replayed(3, e.batches[3]) // the engine no longer keeps 1 and 2
	s.Replayed(4, e.batches[4])
	s.EndReplay()
	if e.held(s, 0) {
		t.Error("a block from before the lost batches is still believed: they may have removed it")
	}
	if !e.held(s, 3) || !e.held(s, 4) {
		t.Error("batches after the loss were not applied")
	}
	if st := s.Stats(); st.Lost != 1 || st.Repaired != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestNoReplayAtAllCountsAsLost(t *testing.T) {
	e, s := newEngine(t, 3), newTestStream()
	s.Offer(0, e.batches[0])
	s.Offer(2, e.batches[2])
	s.EndReplay()
	if e.held(s, 0) || !e.held(s, 2) || s.Stats().Lost != 1 {
		t.Errorf("held 0: %v, held 2: %v, stats %+v", e.held(s, 0), e.held(s, 2), s.Stats())
	}
}

func TestASequenceThatRewindsIsARestartedEngine(t *testing.T) {
	e, s := newEngine(t, 3), newTestStream()
	s.Offer(0, e.batches[0])
	s.Offer(1, e.batches[1])
	s.Offer(0, e.batches[2]) // numbered 0 again
	if e.held(s, 0) || e.held(s, 1) || !e.held(s, 2) || s.Stats().Rewinds != 1 {
		t.Errorf("after a rewind: held %v %v %v, stats %+v", e.held(s, 0), e.held(s, 1), e.held(s, 2), s.Stats())
	}
}

func TestAMalformedBatchEmptiesTheSet(t *testing.T) {
	e, s := newEngine(t, 2), newTestStream()
	s.Offer(0, e.batches[0])
	s.Offer(1, []byte("\xc1 not msgpack"))
	if e.held(s, 0) || s.Stats().Malformed != 1 {
		t.Errorf("a block survived a batch that did not decode (it may have removed it): stats %+v", s.Stats())
	}
}

func TestJoiningLateReplaysFromTheStart(t *testing.T) {
	e, s := newEngine(t, 3), newTestStream()
	from, gap := s.Offer(2, e.batches[2])
	if !gap || from != 0 {
		t.Fatalf("the first batch heard is 2: Offer = %d, %v, want a replay from 0", from, gap)
	}
	for i := range 3 {
		s.Replayed(uint64(i), e.batches[i])
	}
	s.EndReplay()
	if !e.held(s, 0) || !e.held(s, 2) || s.Stats().Repaired != 1 {
		t.Errorf("stats %+v", s.Stats())
	}
}

// While a replay runs, the engine goes on publishing: the live copies of the
// batches the replay already applied arrive after it. They are duplicates,
// not a restarted engine, and must leave the set alone; an engine that
// really goes back is still seen.
func TestLiveCopiesOfReplayedBatchesAreNoRewind(t *testing.T) {
	e, s := newEngine(t, 4), newTestStream()
	if _, gap := s.Offer(1, e.batches[1]); !gap {
		t.Fatal("joining at 1 is no gap")
	}
	for i := range 3 { // the replay reaches past the live batch that asked for it
		s.Replayed(uint64(i), e.batches[i])
	}
	s.EndReplay()
	s.Offer(2, e.batches[2]) // the live copy of a replayed batch
	s.Offer(3, e.batches[3])
	if st := s.Stats(); st.Rewinds != 0 || !e.held(s, 0) || !e.held(s, 3) || st.Batches != 4 {
		t.Fatalf("a replayed batch's live copy was taken as a rewind: held %v %v, stats %+v", e.held(s, 0), e.held(s, 3), st)
	}
	s.Offer(0, e.batches[0]) // numbered 0 again: a restart
	if s.Stats().Rewinds != 1 || e.held(s, 3) {
		t.Errorf("a real rewind after a replay went unseen: stats %+v", s.Stats())
	}
}

// A stream that just joined catches up from the replay before any live
// batch: the set holds what the engine kept at once, the join counts as a
// gap repaired, and the live copies of the replayed batches, queued on the
// socket meanwhile, are duplicates.
func TestACatchUpAtJoinFillsTheSetBeforeAnyLiveBatch(t *testing.T) {
	e, s := newEngine(t, 4), newTestStream()
	if from, ok := s.CatchUp(); !ok || from != 0 {
		t.Fatalf("a stream that just joined catches up from %d, %v; want from 0", from, ok)
	}
	for i := range 3 {
		s.Replayed(uint64(i), e.batches[i])
	}
	s.EndCatchUp()
	if !e.held(s, 0) || !e.held(s, 2) {
		t.Fatal("the replayed batches are not held")
	}
	s.Offer(1, e.batches[1]) // live copies
	s.Offer(2, e.batches[2])
	s.Offer(3, e.batches[3])
	if st := s.Stats(); st.Rewinds != 0 || st.Gaps != 1 || st.Repaired != 1 || st.Batches != 4 || !e.held(s, 0) || !e.held(s, 3) {
		t.Fatalf("after the live copies: held %v %v, stats %+v", e.held(s, 0), e.held(s, 3), st)
	}
	// Rejoined (a new connection), it catches up from where it is.
	s.Rejoin()
	if from, ok := s.CatchUp(); !ok || from != 4 {
		t.Errorf("a rejoined stream catches up from %d, %v; want from 4", from, ok)
	}
	s.EndCatchUp()
	if !e.held(s, 0) {
		t.Error("a rejoin emptied the set: the next batch, not the connection, tells a restarted engine")
	}
}

// A batch numbered as one the catch-up applied but carrying another payload
// is a restarted engine's, not a copy: the set is emptied.
func TestAfterACatchUpARestartedEnginesBatchOfAReplayedNumberIsARewind(t *testing.T) {
	e, s := newEngine(t, 4), newTestStream()
	s.CatchUp()
	for i := range 3 {
		s.Replayed(uint64(i), e.batches[i])
	}
	s.EndCatchUp()
	s.Offer(1, e.batches[3]) // number 1, the payload of another batch
	if st := s.Stats(); st.Rewinds != 1 || e.held(s, 0) || !e.held(s, 3) {
		t.Fatalf("a restarted engine's batch taken for a copy: held %v %v, stats %+v", e.held(s, 0), e.held(s, 3), st)
	}
}

// A catch-up that got nothing (the engine kept no batch, or did not answer)
// leaves the stream to its first live batch, which asks for the replay.
func TestACatchUpThatGotNothingLeavesTheFirstLiveBatchToAskForTheReplay(t *testing.T) {
	e, s := newEngine(t, 3), newTestStream()
	s.CatchUp()
	s.EndCatchUp()
	if from, gap := s.Offer(2, e.batches[2]); !gap || from != 0 {
		t.Fatalf("Offer(2) = %d, %v; want a replay from 0", from, gap)
	}
}
