package affinity

import (
	"testing"
	"time"
)

// TestThePeerShareSpreadsABurstBeforeThePeersReport: a replica with 7 peers
// counts each of its own recent reservations 8 times, so a burst of hits on
// one owner sheds once 8 of them exceed 64, after 9 instead of 65.
func TestThePeerShareSpreadsABurstBeforeThePeersReport(t *testing.T) {
	for _, tc := range []struct {
		peers   int
		atOwner int
	}{{0, 31}, {7, 10}} {
		f := newFleet(t, 8, Settings{})
		f.loads.SetPeerShare(tc.peers, 100*time.Millisecond, f.clock)
		s := text("system prompt shared by every session", 200)
		owner := f.route(t, s).Worker
		f.clock.Advance(time.Second)
		n := 0
		for range 30 {
			if d, _ := f.hold(t, s); d.Worker == owner {
				n++
			}
		}
		if n+1 != tc.atOwner { // the first, released, request counted too
			t.Errorf("%d peers: %d of 31 requests on the owner, want %d", tc.peers, n+1, tc.atOwner)
		}
	}
}

// TestThePeerShareFadesWithinOneInterval: the peers' reports carry the
// truth by then.
func TestThePeerShareFadesWithinOneInterval(t *testing.T) {
	f := newFleet(t, 2, Settings{})
	f.loads.SetPeerShare(7, 100*time.Millisecond, f.clock)
	l := f.loads.Get(1)
	for range 5 {
		f.router.selectAndReserve(&Request{}, NewPool([]*Load{l}))
	}
	v := f.loads.burstNow()
	if got := l.recent.expected(v); got != 35 {
		t.Fatalf("expected share %d right after 5 reservations, want 7*5", got)
	}
	f.clock.Advance(60 * time.Millisecond)
	if got := l.recent.expected(f.loads.burstNow()); got == 0 || got >= 35 {
		t.Fatalf("share %d 60 ms later, want fading", got)
	}
	f.clock.Advance(50 * time.Millisecond)
	if got := l.recent.expected(f.loads.burstNow()); got != 0 {
		t.Fatalf("share %d 110 ms later, want 0", got)
	}
	f.loads.SetPeerShare(0, time.Second, f.clock)
	if v := f.loads.burstNow(); v.peers != 0 {
		t.Fatalf("peer share still on after SetPeerShare(0)")
	}
}
