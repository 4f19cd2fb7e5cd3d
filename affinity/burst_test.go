package affinity

import (
	"fmt"
	"testing"
	"time"
)

// TestThePeerShareSpreadsABurstBeforeThePeersReport: a replica with 7 peers
// counts each of its own recent reservations 8 times, so a burst of hits on
// one owner sheds once 8 of them exceed 64, after 9 instead of 65. Hot-prefix
// spreading is off: this pins the overload rule alone.
func TestThePeerShareSpreadsABurstBeforeThePeersReport(t *testing.T) {
	for _, tc := range []struct {
		peers   int
		atOwner int
	}{{0, 31}, {7, 10}} {
		f := newFleet(t, 8, Settings{Thresholds: withoutHotSpread()})
		f.loads.SetPeerShare(tc.peers, 100*time.Millisecond, f.clock)
		s := text("system prompt shared by every session", 200)
		owner := f.route(t, s).Worker
		f.clock.Step(time.Second)
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

// TestAnOverloadCheckOnReportsLetsABurstStayOnItsOwner: with
// OverloadOnReports the same burst of hits stays on the owner, as a lone
// replica's does, while a miss is still placed counting the share.
func TestAnOverloadCheckOnReportsLetsABurstStayOnItsOwner(t *testing.T) {
	f := newFleet(t, 8, Settings{OverloadOnReports: true, Thresholds: withoutHotSpread()}) // the overload rule alone
	f.loads.SetPeerShare(7, 100*time.Millisecond, f.clock)
	s := text("system prompt shared by every session", 200)
	owner := f.route(t, s).Worker
	f.clock.Step(time.Second)
	n := 0
	for range 30 {
		if d, _ := f.hold(t, s); d.Worker == owner {
			n++
		}
	}
	if n != 30 {
		t.Errorf("%d of 30 held hits on the owner with the overload check on reports, want all 30", n)
	}
	if d, _ := f.hold(t, text("a new prefix", 200)); d.Worker == owner {
		t.Errorf("a miss went to the owner holding 30 (x8 with the share): %+v", d)
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
	f.clock.Step(60 * time.Millisecond)
	if got := l.recent.expected(f.loads.burstNow()); got == 0 || got >= 35 {
		t.Fatalf("share %d 60 ms later, want fading", got)
	}
	f.clock.Step(50 * time.Millisecond)
	if got := l.recent.expected(f.loads.burstNow()); got != 0 {
		t.Fatalf("share %d 110 ms later, want 0", got)
	}
	f.loads.SetPeerShare(0, time.Second, f.clock)
	if v := f.loads.burstNow(); v.peers != 0 {
		t.Fatalf("peer share still on after SetPeerShare(0)")
	}
}

// TestReplicasOfATierPlaceANewPrefixAlike: with live peers, a miss that
// matched nothing is placed by rendezvous even under least_load placement,
// so two replicas whose views differ send a new prefix to the same worker;
// alone, a replica keeps least load.
func TestReplicasOfATierPlaceANewPrefixAlike(t *testing.T) {
	for _, peers := range []int{1, 0} {
		a, b := newFleet(t, 16, Settings{}), newFleet(t, 16, Settings{})
		a.loads.SetPeerShare(peers, 100*time.Millisecond, a.clock)
		b.loads.SetPeerShare(peers, 100*time.Millisecond, b.clock)
		a.setLoad(1, 1) // a's least loaded is worker 2, b's worker 1
		b.setLoad(2, 1)
		same := 0
		for i := range 50 {
			s := text(fmt.Sprint(i, " new prefix"), 100)
			if a.route(t, s).Worker == b.route(t, s).Worker {
				same++
			}
			a.clock.Step(time.Second) // let each reservation's share fade
			b.clock.Step(time.Second)
		}
		if peers > 0 && same != 50 {
			t.Errorf("with a peer, %d of 50 new prefixes went to the same worker on both replicas, want all", same)
		}
		if peers == 0 && same == 50 {
			t.Errorf("alone, both replicas placed all 50 alike: least load was not used")
		}
	}
}

// withoutHotSpread is the default thresholds with hot-prefix spreading off.
func withoutHotSpread() Thresholds {
	t := DefaultThresholds()
	t.HotLoad = 0
	return t
}
