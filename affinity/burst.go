package affinity

import (
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// A replica learns its peers' in-flight counts only from their reports, one
// gossip interval old at worst. In a burst (a thousand rollouts at once, or
// every session's first turn) each replica would see the same owner or the
// same least-loaded worker as idle, and all of them would pile onto it before
// the first report arrives. The peer share corrects for that: each replica
// assumes that every peer sent the same worker what it sent itself within the
// last report interval, and counts that in the load it selects on. The load
// balancer in front spreads requests evenly over the replicas, so that is the
// expected value of what the peers' next reports will say.
//
// Reservations are counted in windows of half an interval, the previous
// window fading linearly, so the estimate always covers half an interval of
// reservations (a peer's latest report is that old on average) and is gone
// one interval after the last of them. It only adds to the load a replica
// selects on; the counts it reports and shows stay exact.

// peerShare is a table's setting of the peer share: how many peers, over
// which window, on which clock. A nil pointer turns it off.
type peerShare struct {
	peers    int64
	interval int64 // the window, half the report interval, in nanoseconds
	clock    clock.PassiveClock
}

// burstView is the peer share at one instant, read once per selection so
// that the clock is read once, not once per candidate.
type burstView struct {
	peers  int64
	window int64   // the current window's number
	fade   float64 // the weight of the previous window, in [0, 1]
}

// recentReservations counts one worker's reservations by this replica in the
// current and the previous window of one report interval. Lock-free and
// approximate: a reservation racing with a window change may be counted in
// either window, which moves the estimate by one request.
type recentReservations struct {
	window    atomic.Int64
	cur, prev atomic.Int64
}

// SetPeerShare makes selection count, on top of the merged load, peers times
// this replica's own reservations of the last half interval (see above);
// interval is the peers' report interval. Call it when the number of live
// peers changes; peers <= 0 turns it off.
func (t *LoadTable) SetPeerShare(peers int, interval time.Duration, clk clock.PassiveClock) {
	if peers <= 0 || interval <= 0 || clk == nil {
		t.share.Store(nil)
		return
	}
	t.share.Store(&peerShare{peers: int64(peers), interval: int64(max(interval/2, 1)), clock: clk})
}

// burstNow reads the peer share's setting and the clock once.
func (t *LoadTable) burstNow() burstView {
	s := t.share.Load()
	if s == nil {
		return burstView{}
	}
	now := s.clock.Now().UnixNano()
	w := now / s.interval
	return burstView{peers: s.peers, window: w, fade: 1 - float64(now-w*s.interval)/float64(s.interval)}
}

// note counts one reservation in window w.
func (r *recentReservations) note(w int64) {
	for {
		seen := r.window.Load()
		if seen >= w {
			r.cur.Add(1)
			return
		}
		if r.window.CompareAndSwap(seen, w) {
			last := r.cur.Swap(1)
			if seen != w-1 {
				last = 0
			}
			r.prev.Store(last)
			return
		}
	}
}

// expected is the peers' expected unreported share of the worker's load.
func (r *recentReservations) expected(v burstView) int64 {
	if v.peers == 0 {
		return 0
	}
	var n float64
	switch r.window.Load() {
	case v.window:
		n = float64(r.cur.Load()) + float64(r.prev.Load())*v.fade
	case v.window - 1:
		n = float64(r.cur.Load()) * v.fade
	}
	return int64(float64(v.peers)*n + 0.5)
}
