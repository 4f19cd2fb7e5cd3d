package kvevents

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// testGeo is the geometry of the tests' sets.
var testGeo = geometry{blockSize: testBlock, maxBlocks: 1000}

// follower is a view that takes a hearer's relay through the wire, as a
// peer does.
type follower struct {
	t    *testing.T
	view *View
}

func newFollower(t *testing.T) follower {
	return follower{t, NewView(ViewConfig{BlockSize: testBlock, MaxBlocks: 1000})}
}

// take decodes pkts and hands every record to the follower's view.
func (f follower) take(pkts [][]byte) {
	f.t.Helper()
	for _, p := range pkts {
		err := DecodeRelay(p, testGeo, func(o string, b RelayedBatch) { f.view.Relayed(o, b) },
			func(o string, h Heartbeat) { f.view.HeardOf(o, h, time.Now().Add(time.Second)) })
		if err != nil {
			f.t.Fatal(err)
		}
	}
}

// hearer is a stream whose applied batches are written as relay packets.
type hearer struct {
	stream *Stream
	w      relayWriter
}

func newHearer() *hearer {
	h := &hearer{stream: NewStream(NewSet(testBlock, 1000)), w: relayWriter{origin: "hearer", geo: testGeo}}
	h.stream.OnApplied(func(a Applied) { h.w.batch(7, a) })
	return h
}

func (h *hearer) packets() [][]byte {
	h.w.flush()
	p := h.w.packets
	h.w.packets = nil
	return p
}

func TestAFollowerHoldsWhatTheHearerHolds(t *testing.T) {
	e, h, f := newEngine(t, 3), newHearer(), newFollower(t)
	for i := range 3 {
		h.stream.Offer(uint64(i), e.batches[i])
	}
	f.take(h.packets())
	for i := range 3 {
		if f.view.Matched(AppendKeys(nil, Seed(""), e.prompts[i], testBlock)) != 2 {
			t.Errorf("the follower lacks batch %d", i)
		}
	}
	sameContent(t, h.stream.Set(), f.view.stream.Set())
	if st := f.view.Status(); st.Trust != Disconnected || st.Next != 3 {
		t.Errorf("status %+v: nothing said the hearer hears the engine yet", st)
	}
	f.view.HeardOf("hearer", Heartbeat{Epoch: 0, Next: 3, Started: true}, time.Now().Add(time.Second))
	if got := f.view.Trust(); got != Trusted {
		t.Errorf("a follower in step with a live hearer: %v", got)
	}
}

func TestABatchTooLargeForAPacketGoesInParts(t *testing.T) {
	h, f := newHearer(), newFollower(t)
	big := prompt(1, 900) // 900 blocks: 8 kB of ops
	p := encode(t, Keyed, stored(names(1), nil, big))
	w := relayWriter{origin: "hearer", geo: testGeo}
	h.stream.OnApplied(func(a Applied) {
		for len(a.Ops) < 20_000 { // pad to over a packet with removals of unknown names
			a.Ops = append(a.Ops, Op{Kind: OpRemove, FP: 0xfeed})
		}
		w.batch(7, a)
	})
	h.stream.Offer(0, p)
	w.flush()
	if len(w.packets) < 2 {
		t.Fatalf("%d packets for a batch over one", len(w.packets))
	}
	f.take(w.packets)
	if got := f.view.Matched(AppendKeys(nil, Seed(""), big, testBlock)); got != 900 {
		t.Errorf("the follower matched %d of 900 blocks", got)
	}
	if _, _, started := f.view.position(); !started {
		t.Error("the follower did not finish the batch")
	}
}

func TestAFollowerThatMissesABatchWantsASnapshotAndHoldsWhatFollows(t *testing.T) {
	e, h, f := newEngine(t, 4), newHearer(), newFollower(t)
	h.stream.Offer(0, e.batches[0])
	f.take(h.packets())
	h.stream.Offer(1, e.batches[1])
	_ = h.packets() // lost
	h.stream.Offer(2, e.batches[2])
	f.take(h.packets())
	if origin, ok := f.view.Wanted(); !ok || origin != "hearer" {
		t.Fatalf("a gap: wanted %v from %q", ok, origin)
	}
	f.view.HeardOf("hearer", Heartbeat{Epoch: 0, Next: 3, Started: true}, time.Now().Add(time.Second))
	if got := f.view.Trust(); got != Replaying {
		t.Fatalf("a follower that missed a batch: %v, want replaying", got)
	}
	snap := snapshotOf(t, h.stream, 0)
	h.stream.Offer(3, e.batches[3])
	f.take(h.packets()) // arrives while the snapshot is on its way: held
	if !f.view.Restore(snap) {
		t.Fatal("the snapshot was refused")
	}
	sameContent(t, h.stream.Set(), f.view.stream.Set())
	if _, ok := f.view.Wanted(); ok || f.view.Trust() != Trusted {
		t.Errorf("after the snapshot: wanted %v, %v", ok, f.view.Trust())
	}
}

func TestAHeartbeatAheadOfTheFollowerIsAGap(t *testing.T) {
	e, h, f := newEngine(t, 2), newHearer(), newFollower(t)
	h.stream.Offer(0, e.batches[0])
	f.take(h.packets())
	f.view.HeardOf("hearer", Heartbeat{Epoch: 0, Next: 1, Started: true}, time.Now().Add(time.Second))
	if _, ok := f.view.Wanted(); ok {
		t.Fatal("a heartbeat at the follower's own position is no gap")
	}
	h.stream.Offer(1, e.batches[1])
	_ = h.packets() // the last batch before a quiet spell, lost
	f.view.HeardOf("hearer", Heartbeat{Epoch: 0, Next: 2, Started: true}, time.Now().Add(time.Second))
	if _, ok := f.view.Wanted(); !ok {
		t.Fatal("a heartbeat past the follower's position is a gap")
	}
	g := newFollower(t)
	g.view.HeardOf("hearer", Heartbeat{}, time.Now().Add(time.Second))
	if _, ok := g.view.Wanted(); ok || g.view.Trust() != Unheard {
		t.Fatalf("a hearer that heard nothing yet: wanted %v, %v; want unheard and nothing to fetch", ok, g.view.Trust())
	}
}

func TestAHearersResetStartsAFreshEpochThatFollowersTakeFromAnywhere(t *testing.T) {
	e, h, f := newEngine(t, 4), newHearer(), newFollower(t)
	h.stream.Offer(0, e.batches[0])
	f.take(h.packets())
	h.stream.Offer(3, e.batches[3]) // a gap the hearer cannot fill
	h.stream.EndReplay()
	f.take(h.packets())
	if epoch, next, _ := f.view.position(); epoch != 1 || next != 4 {
		t.Fatalf("the follower is at %d/%d, want the hearer's fresh epoch 1, next 4", epoch, next)
	}
	sameContent(t, h.stream.Set(), f.view.stream.Set())
	if st := f.view.Status(); st.Stats.PeerResets != 1 {
		t.Errorf("stats %+v: the peer's reset is counted", st.Stats)
	}
	f.view.HeardOf("hearer", Heartbeat{Epoch: 1, Next: 4, Started: true}, time.Now().Add(time.Second))
	if got := f.view.Trust(); got != Recovering {
		t.Errorf("after the hearer's reset: %v, want recovering, as the hearer is", got)
	}
}

func TestALostPartLeavesTheBatchHalfMadeAndWantsASnapshot(t *testing.T) {
	h, f := newHearer(), newFollower(t)
	w := relayWriter{origin: "hearer", geo: testGeo}
	h.stream.OnApplied(func(a Applied) {
		for len(a.Ops) < 20_000 {
			a.Ops = append(a.Ops, Op{Kind: OpRemove, FP: 0xfeed})
		}
		w.batch(7, a)
	})
	h.stream.Offer(0, encode(t, Keyed, stored(names(1), nil, prompt(1, 2))))
	h.stream.Offer(1, encode(t, Keyed, stored(names(9), nil, prompt(99, 2))))
	w.flush()
	f.take(w.packets[:1])
	f.take(w.packets[2:]) // the second part of batch 0 is lost
	if _, ok := f.view.Wanted(); !ok {
		t.Fatal("a batch missing its parts does not want a snapshot")
	}
}

// head is a relay packet's header from a nameless replica of the tests'
// geometry.
func head() []byte {
	return binary.AppendUvarint([]byte{RelayType, RelayVersion, 0, testBlock}, uint64(testGeo.maxBlocks))
}

func TestRelayPacketsThatDoNotDecodeWholeChangeNothing(t *testing.T) {
	h := newHearer()
	h.stream.Offer(0, encode(t, Keyed, stored(names(1), nil, prompt(1, 2))))
	good := h.packets()[0]
	for name, pkt := range map[string][]byte{
		"cut":          good[:len(good)-3],
		"version":      append([]byte{RelayType, 9}, good[2:]...),
		"type":         append([]byte{3}, good[1:]...),
		"kind":         append(append([]byte{}, good...), 9),
		"geometry":     append([]byte{RelayType, RelayVersion, 0, testBlock, 9}, recHeartbeat, 1, 0, 0),
		"ops over":     append(head(), recBatch, 7, 0, 0, 0, 0, 0xff, 0xff, 0x03),
		"zero store":   append(head(), recBatch, 7, 0, 0, 0, 0, 1, byte(OpStore), 0, 0, 0, 0, 1, 0, 0, 0),
		"over 32 bits": append(head(), recHeartbeat, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 1),
		"beat flags":   append(head(), recHeartbeat, 1, 0, 0, 4),
		"long origin":  append([]byte{RelayType, RelayVersion, 0xff, 0x01}, make([]byte, 300)...),
	} {
		called := false
		err := DecodeRelay(pkt, testGeo, func(string, RelayedBatch) { called = true }, func(string, Heartbeat) { called = true })
		if !errors.Is(err, ErrRelay) && !errors.Is(err, ErrGeometry) || called {
			t.Errorf("%s: err %v, records handed on %v", name, err, called)
		}
	}
}

func TestSnapshotsRoundTripWithinTheirBounds(t *testing.T) {
	e, h := newEngine(t, 3), newHearer()
	for i := range 3 {
		h.stream.Offer(uint64(i), e.batches[i])
	}
	snap := snapshotOf(t, h.stream, 0)
	b := AppendSnapshots(nil, map[uint32]Snapshot{7: snap})
	got, err := DecodeSnapshots(b, 8, 1000)
	if err != nil {
		t.Fatal(err)
	}
	f := newFollower(t)
	if !f.view.Restore(got[7]) {
		t.Fatal("refused")
	}
	sameContent(t, h.stream.Set(), f.view.stream.Set())
	if _, err := DecodeSnapshots(b, 8, 2); !errors.Is(err, ErrRelay) {
		t.Errorf("a snapshot over the block bound: %v", err)
	}
	if _, err := DecodeSnapshots(b, 0, 1000); !errors.Is(err, ErrRelay) {
		t.Errorf("more snapshots than asked: %v", err)
	}
	if _, err := DecodeSnapshots(b[:len(b)-1], 8, 1000); !errors.Is(err, ErrRelay) {
		t.Errorf("a cut snapshot: %v", err)
	}
}

// snapshotOf is a stream's set as a snapshot at its position.
func snapshotOf(_ testing.TB, s *Stream, _ int) Snapshot {
	epoch, next, _ := s.Position()
	snap := Snapshot{Epoch: epoch, Next: next, BlockSize: testBlock}
	snap.Names, snap.Keys = s.Set().Content(nil, nil)
	return snap
}

func FuzzDecodeRelay(f *testing.F) {
	h := newHearer()
	h.stream.Offer(0, encodeBatch(f, Keyed, stored(names(1), nil, prompt(1, 2))))
	w := relayWriter{origin: "r1", geo: testGeo}
	w.heartbeat(Heartbeat{Worker: 3, Epoch: 1, Next: 9})
	w.flush()
	f.Add(h.packets()[0])
	f.Add(w.packets[0])
	f.Fuzz(func(t *testing.T, pkt []byte) {
		v := NewView(ViewConfig{BlockSize: testBlock, MaxBlocks: 1000})
		_ = DecodeRelay(pkt, testGeo, func(o string, b RelayedBatch) {
			if len(b.Ops) > len(pkt) {
				t.Fatalf("%d ops from %d bytes", len(b.Ops), len(pkt))
			}
			v.Relayed(o, b)
		}, func(o string, h Heartbeat) { v.HeardOf(o, h, time.Now()) })
		checkSet(t, v.stream.Set(), 64)
	})
}

func FuzzDecodeSnapshots(f *testing.F) {
	e, h := newEngine(f, 2), newHearer()
	h.stream.Offer(0, e.batches[0])
	f.Add(AppendSnapshots(nil, map[uint32]Snapshot{1: snapshotOf(nil, h.stream, 0)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		snaps, err := DecodeSnapshots(b, 4, 64)
		if err != nil {
			return
		}
		v := NewView(ViewConfig{BlockSize: testBlock, MaxBlocks: 64})
		for _, s := range snaps {
			v.Restore(s)
			checkSet(t, v.stream.Set(), 64)
		}
	})
}
