package loadsync

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// queuedBy returns the facts one Owned call queued, by flushing the queue.
func queuedBy(t *testing.T, r *replica, now *time.Time, hashes []uint64, worker uint32) []Fact {
	t.Helper()
	r.st.Owned(hashes, worker)
	*now = now.Add(DefaultLoadInterval)
	return factsIn(t, r.st.Tick(*now))
}

func TestOwnedQueuesDeepestBlockAndPowerOfTwoCheckpointsWithTheirSpans(t *testing.T) {
	cases := []struct {
		blocks int
		depths []int
		spans  []uint32 // add up to blocks
	}{
		{0, nil, nil},
		{1, []int{0}, []uint32{1}},
		{2, []int{0, 1}, []uint32{1, 1}},
		{4, []int{0, 1, 3}, []uint32{1, 1, 2}},
		{10, []int{0, 1, 3, 7, 9}, []uint32{1, 1, 2, 4, 2}},
		{16, []int{0, 1, 3, 7, 15}, []uint32{1, 1, 2, 4, 8}},
		{100, []int{0, 1, 3, 7, 15, 31, 63, 99}, []uint32{1, 1, 2, 4, 8, 16, 32, 36}},
	}
	for _, tc := range cases {
		r := newReplica(t, "a", nil)
		now := t0
		hashes := chain(1, tc.blocks)
		got := queuedBy(t, r, &now, hashes, 7)
		var want []Fact
		for i, d := range tc.depths {
			want = append(want, Fact{Hash: hashes[d], Worker: 7, Span: tc.spans[i]})
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d blocks: queued %v, want %v", tc.blocks, got, want)
		}
	}
}

// TestSkippedFactsKeepTheirSpans pins that spans are computed before the
// recent set filters a continuation turn: the new facts stand for the
// blocks beyond the checkpoints already sent, not for the whole chain.
func TestSkippedFactsKeepTheirSpans(t *testing.T) {
	r := newReplica(t, "a", nil)
	now := t0
	queuedBy(t, r, &now, chain(1, 12), 3) // 0, 1, 3, 7 and 11
	hashes := chain(1, 20)
	got := queuedBy(t, r, &now, hashes, 3)
	want := []Fact{{Hash: hashes[15], Worker: 3, Span: 8}, {Hash: hashes[19], Worker: 3, Span: 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("continuation queued %v, want %v", got, want)
	}
}

func TestSpansTravelInDigestsAndFullState(t *testing.T) {
	a, b, c := newReplica(t, "a", nil), newReplica(t, "b", nil), newReplica(t, "c", nil)
	const blocks = 200
	a.st.Owned(chain(1, blocks), 300)
	a.st.Owned([]uint64{42}, math.MaxUint32)
	deliver(t, a.st.Tick(t0), t0, b)
	if err := c.st.MergeRemoteState(a.st.LocalState(true)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{b, c} {
		var sum uint32
		for _, f := range r.learned.all() {
			if f.Worker == 300 {
				sum += f.Span
			}
		}
		if sum != blocks {
			t.Fatalf("the spans learned add up to %d blocks, want the chain's %d", sum, blocks)
		}
		if f := (Fact{Hash: 42, Worker: math.MaxUint32, Span: 1}); !r.learned.has(f) {
			t.Fatalf("did not learn %v", f)
		}
	}
}

// TestContinuationTurnQueuesAtMostTwoFacts: within a refresh interval a
// growing conversation costs its new deepest block and at most one new
// checkpoint per turn.
func TestContinuationTurnQueuesAtMostTwoFacts(t *testing.T) {
	r := newReplica(t, "a", func(c *Config) { c.RefreshInterval = time.Hour })
	now := t0
	blocks := 12
	first := queuedBy(t, r, &now, chain(1, blocks), 3)
	if len(first) != 5 { // depths 0, 1, 3, 7 and 11
		t.Fatalf("first turn queued %d facts, want 5", len(first))
	}
	for turn := 2; turn <= 30; turn++ {
		blocks += 2 + turn%7 // each turn appends the answer and a new question
		got := queuedBy(t, r, &now, chain(1, blocks), 3)
		if len(got) == 0 || len(got) > 2 {
			t.Fatalf("turn %d (%d blocks) queued %d facts %v, want 1 or 2", turn, blocks, len(got), got)
		}
		if got[len(got)-1].Hash != chain(1, blocks)[blocks-1] {
			t.Fatalf("turn %d did not announce its deepest block", turn)
		}
	}
}

// TestLiveConversationsAreRefreshed: a decision made again after the
// refresh interval announces its checkpoints again, so the peers' indexes
// see the whole prefix as recently used; before half the interval it is
// skipped.
func TestLiveConversationsAreRefreshed(t *testing.T) {
	r := newReplica(t, "a", func(c *Config) { c.RefreshInterval = time.Second })
	now := t0
	hashes := chain(1, 12)
	if got := queuedBy(t, r, &now, hashes, 3); len(got) != 5 {
		t.Fatalf("first decision queued %d facts, want 5", len(got))
	}
	if got := queuedBy(t, r, &now, hashes, 3); len(got) != 0 {
		t.Fatalf("a repeat %v later queued %v, want nothing", DefaultLoadInterval, got)
	}
	now = now.Add(time.Second)
	r.st.Tick(now)
	if got := queuedBy(t, r, &now, hashes, 3); len(got) != 5 {
		t.Fatalf("a repeat after the refresh interval queued %d facts, want all 5 again", len(got))
	}
}

func TestRecentlySentFactsAreSkipped(t *testing.T) {
	r := newReplica(t, "a", nil)
	now := t0
	hashes := chain(1, 10)
	if got := queuedBy(t, r, &now, hashes, 3); len(got) != 5 {
		t.Fatalf("first decision queued %d facts, want 5", len(got))
	}
	if got := queuedBy(t, r, &now, hashes, 3); len(got) != 0 {
		t.Fatalf("the same decision again queued %v, want nothing", got)
	}
	if got := queuedBy(t, r, &now, hashes, 4); len(got) != 5 {
		t.Fatalf("the same prefix placed on another worker queued %d facts, want 5", len(got))
	}
	if st := r.st.Stats(); st.FactsDeduplicated != 5 || st.FactsQueued != 10 || st.FactsSent != 10 {
		t.Fatalf("stats %+v, want 5 deduplicated, 10 queued, 10 sent", st)
	}
}

func TestLearnedFactsAreNotSentAgain(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	hashes := chain(1, 10)
	a.st.Owned(hashes, 3)
	deliver(t, a.st.Tick(t0), t0, b)
	spans := map[int]uint32{0: 1, 1: 1, 3: 2, 7: 4, 9: 2}
	for d, span := range spans {
		if f := (Fact{Hash: hashes[d], Worker: 3, Span: span}); !b.learned.has(f) {
			t.Fatalf("b did not learn %v", f)
		}
	}
	now := t0
	if got := queuedBy(t, b, &now, hashes, 3); len(got) != 0 {
		t.Fatalf("b re-announced %v that it had learned from a", got)
	}
}

func TestDigestsAreBatchedUnderThePacketLimit(t *testing.T) {
	const maxBytes, perTick = 512, 4
	a := newReplica(t, "a", func(c *Config) { c.MaxPacketBytes, c.DigestPacketsPerTick = maxBytes, perTick })
	b := newReplica(t, "b", nil)
	for conv := range uint64(2000) {
		a.st.Owned(chain(conv, 5), uint32(conv%300)) // 4 facts each
	}
	now := t0
	var sent, packets, ticks int
	for tick := 0; sent < 8000; tick++ {
		ticks++
		if tick > 100 {
			t.Fatalf("only %d of 8000 facts sent after 100 ticks", sent)
		}
		now = now.Add(DefaultLoadInterval)
		pkts := a.st.Tick(now)
		// The facts fill the report's packet, then packets of their own:
		// one more packet than digests alone would take, at most.
		digests := factPackets(t, pkts)
		if digests > perTick+1 {
			t.Fatalf("tick %d sent facts in %d packets, over %d", tick, digests, perTick+1)
		}
		for _, p := range pkts {
			if len(p) > maxBytes {
				t.Fatalf("packet of %d bytes, over %d", len(p), maxBytes)
			}
		}
		sent += len(factsIn(t, pkts))
		packets += digests
		deliver(t, pkts, now, b)
	}
	if got := len(b.learned.all()); got != 8000 {
		t.Fatalf("b learned %d facts, want 8000", got)
	}
	// Workers under 300 take at most 2 bytes and spans under 128 one: 44
	// facts of 11 bytes fit beside a report's header. Each tick's first
	// packet of facts is the report's own, which they fill where it ends.
	if full := (maxBytes - reportHeaderMaxBytes("a") - sectionOverhead - 3) / 11; sent < (packets-ticks)*full {
		t.Fatalf("%d facts in %d packets over %d ticks: packets hold fewer than %d facts", sent, packets, ticks, full)
	}
}

// TestDigestsWithWideFactsStayUnderThePacketLimit packs facts whose worker
// ids and spans take up to five varint bytes each.
func TestDigestsWithWideFactsStayUnderThePacketLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	queue := newFactRing(2000)
	var want []Fact
	for i := range 2000 {
		f := Fact{Hash: uint64(i), Worker: rng.Uint32() >> rng.IntN(32), Span: rng.Uint32() >> rng.IntN(32)}
		queue.push(f)
		want = append(want, f)
	}
	const maxBytes = minPacketBytes
	runs := takeFacts(&queue, maxBytes, 1000)
	h := reportHeader{origin: "a", epoch: 1, seq: 1}
	pkts := append(digestPackets(runs), packReport(&h, nil, slices.Concat(runs...), maxBytes)...)
	want = append(want, want...) // once in digests, once in reports
	for _, p := range pkts {
		if len(p) > maxBytes {
			t.Fatalf("packet of %d bytes, over %d", len(p), maxBytes)
		}
	}
	if got := factsIn(t, pkts); !slices.Equal(got, want) {
		t.Fatalf("sent %d facts, not the %d queued in order", len(got), len(want))
	}
}

func TestDigestQueueDropsOldestWhenFull(t *testing.T) {
	r := newReplica(t, "a", func(c *Config) { c.DigestQueueFacts = 100 })
	for conv := range uint64(150) {
		r.st.Owned(chain(conv, 1), 1)
	}
	got := factsIn(t, r.st.Tick(t0))
	if len(got) != 100 || got[0].Hash != chain(50, 1)[0] {
		t.Fatalf("sent %d facts starting at %x; want the newest 100, from conversation 50", len(got), got[0].Hash)
	}
	if st := r.st.Stats(); st.FactsDropped != 50 {
		t.Fatalf("FactsDropped = %d, want 50", st.FactsDropped)
	}
}

func TestFullStateRoundTripIsBoundedAndNewest(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) { c.FullStateFacts, c.PushPullFacts = 1000, 100 })
	for conv := range uint64(5000) {
		a.st.Owned(chain(conv, 1), uint32(conv%7))
	}
	full := a.st.LocalState(true)
	if limit := headerBytes + 3 + 1000*factMaxBytes; len(full) > limit {
		t.Fatalf("join state is %d bytes, over %d for 1000 facts", len(full), limit)
	}
	b := newReplica(t, "b", nil)
	if err := b.st.MergeRemoteState(full); err != nil {
		t.Fatal(err)
	}
	learned := b.learned.all()
	if len(learned) != 1000 || learned[0] != (Fact{Hash: chain(4000, 1)[0], Worker: 4000 % 7, Span: 1}) {
		t.Fatalf("joiner learned %d facts starting %v; want the newest 1000, oldest first", len(learned), learned[0])
	}
	facts, err := decodeFacts(a.st.LocalState(false), msgFullState)
	if err != nil || len(facts) != 100 {
		t.Fatalf("anti-entropy state: %d facts, %v; want 100", len(facts), err)
	}
	now := t0
	if got := queuedBy(t, b, &now, chain(4999, 1), 4999%7); len(got) != 0 {
		t.Fatalf("joiner re-announced a fact from the full state: %v", got)
	}
}

func TestFactSetIsBoundedAndKeepsFactsInUse(t *testing.T) {
	s := newFactSet(100)
	hot := Fact{Hash: 42, Worker: 1}
	s.add(hot)
	for i := range uint64(1000) {
		s.add(Fact{Hash: 1000 + i, Worker: 2})
		if i%40 == 0 && s.add(hot) {
			t.Fatalf("a fact in steady use was forgotten after %d others", i)
		}
	}
	if n := len(s.cur) + len(s.prev); n > 100 {
		t.Fatalf("set holds %d keys, over its limit of 100", n)
	}
	if !s.add(Fact{Hash: 1000, Worker: 2}) {
		t.Fatal("an old fact was never forgotten")
	}
}

// TestAHitDemotesTheSupersededDeepestFact: a continuation turn routed as a
// hit on the worker that held the previous turn announces the previous
// turn's deepest fact again as superseded, since the new deepest fact's
// span covers its stretch: the peers charge the prefix once.
func TestAHitDemotesTheSupersededDeepestFact(t *testing.T) {
	r := newReplica(t, "a", nil)
	now := t0
	queuedBy(t, r, &now, chain(1, 12), 3) // 0, 1, 3, 7 and 11 (span 4)
	hashes := chain(1, 14)
	r.st.OwnedBeyond(hashes, 11, 3)
	now = now.Add(DefaultLoadInterval)
	got := factsIn(t, r.st.Tick(now))
	want := []Fact{{Hash: hashes[11], Worker: 3, Span: affinity.SpanSuperseded}, {Hash: hashes[13], Worker: 3, Span: 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("continuation queued %v, want %v", got, want)
	}
}

// TestNoDemotionOfACheckpointOrAMiss: a checkpoint's span never changes,
// and a miss (known -1) or a match below the stretch demotes nothing.
func TestNoDemotionOfACheckpointOrAMiss(t *testing.T) {
	for _, known := range []int{-1, 7, 3} {
		r := newReplica(t, "a", nil)
		now := t0
		hashes := chain(1, 14)
		r.st.OwnedBeyond(hashes, known, 3)
		now = now.Add(DefaultLoadInterval)
		for _, f := range factsIn(t, r.st.Tick(now)) {
			if f.Span == affinity.SpanSuperseded {
				t.Errorf("known %d: demoted %v", known, f)
			}
		}
	}
}
