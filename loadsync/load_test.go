package loadsync

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestRemoteIsTheSumOfOtherReplicasLoads(t *testing.T) {
	a, b, c := newReplica(t, "a", nil), newReplica(t, "b", nil), newReplica(t, "c", nil)
	a.local.set(1, 3)
	b.local.set(1, 4)
	b.local.set(2, 10)
	c.local.set(2, 1)
	now := t0
	deliver(t, a.st.Tick(now), now, b, c)
	deliver(t, b.st.Tick(now), now, a, c)
	deliver(t, c.st.Tick(now), now, a, b)

	cases := []struct {
		r      *replica
		worker uint32
		want   int64
	}{
		{a, 1, 4}, {a, 2, 11}, {b, 1, 3}, {b, 2, 1}, {c, 1, 7}, {c, 2, 10}, {a, 3, 0},
	}
	for _, tc := range cases {
		if got := tc.r.st.Remote(tc.worker); got != tc.want {
			t.Errorf("%s.Remote(%d) = %d, want %d", tc.r.st.cfg.Origin, tc.worker, got, tc.want)
		}
		if got := tc.r.remote.get(tc.worker); got != tc.want {
			t.Errorf("%s OnRemoteLoad table[%d] = %d, want %d", tc.r.st.cfg.Origin, tc.worker, got, tc.want)
		}
	}
}

func TestReorderedAndDuplicateReportsAreIgnored(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 5)
	first := a.st.Tick(t0)
	a.local.set(1, 7)
	second := a.st.Tick(t0.Add(DefaultLoadInterval))

	now := t0.Add(DefaultLoadInterval)
	deliver(t, second, now, b)
	deliver(t, first, now, b)  // reordered: older
	deliver(t, second, now, b) // duplicate
	if got := b.st.Remote(1); got != 7 {
		t.Fatalf("Remote(1) = %d after newer, older, duplicate; want 7", got)
	}
	if st := b.st.Stats(); st.ReportsStale != 2 || st.ReportsAccepted != 1 {
		t.Fatalf("stale=%d accepted=%d, want 2 and 1 (the older report and the copy ignored)", st.ReportsStale, st.ReportsAccepted)
	}
}

func TestLostReportIsSupersededByTheNext(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 5)
	a.local.set(2, 2)
	deliver(t, a.st.Tick(t0), t0, b)
	a.local.set(1, 9)
	a.local.set(2, 0)
	_ = a.st.Tick(t0.Add(DefaultLoadInterval)) // lost
	a.local.set(3, 4)
	now := t0.Add(2 * DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	for w, want := range map[uint32]int64{1: 9, 2: 0, 3: 4} {
		if got := b.st.Remote(w); got != want {
			t.Errorf("Remote(%d) = %d, want %d", w, got, want)
		}
	}
}

func TestRestartedOriginSupersedesItsOldEpoch(t *testing.T) {
	old := newReplica(t, "a", func(c *Config) { c.BootEpoch = 100 })
	b := newReplica(t, "b", nil)
	old.local.set(1, 9)
	now := t0
	for range 50 { // a long-lived process reaches a high sequence
		now = now.Add(DefaultLoadInterval)
		deliver(t, old.st.Tick(now), now, b)
	}
	lateOldReport := old.st.Tick(now.Add(DefaultLoadInterval)) // seq 51, still in flight

	restarted := newReplica(t, "a", func(c *Config) { c.BootEpoch = 200 })
	restarted.local.set(2, 2)
	now = now.Add(DefaultLoadInterval)
	deliver(t, restarted.st.Tick(now), now, b) // seq 1 of the new epoch
	deliver(t, lateOldReport, now, b)

	if got := b.st.Remote(1); got != 0 {
		t.Errorf("Remote(1) = %d: the old process's load survived its restart", got)
	}
	if got := b.st.Remote(2); got != 2 {
		t.Errorf("Remote(2) = %d, want 2 from the new epoch", got)
	}
	if got := b.remote.get(1); got != 0 {
		t.Errorf("OnRemoteLoad left worker 1 at %d, want 0", got)
	}
}

func TestSilentOriginExpiresAfterTTL(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 5)
	deliver(t, a.st.Tick(t0), t0, b)

	b.st.Expire(t0.Add(DefaultLoadTTL))
	if got := b.st.Remote(1); got != 5 {
		t.Fatalf("Remote(1) = %d exactly at the TTL, want 5 still", got)
	}
	b.st.Tick(t0.Add(DefaultLoadTTL + time.Nanosecond))
	if got := b.st.Remote(1); got != 0 {
		t.Fatalf("Remote(1) = %d after the TTL, want 0", got)
	}
	if got := b.remote.get(1); got != 0 {
		t.Fatalf("OnRemoteLoad left worker 1 at %d after expiry, want 0", got)
	}
	if o := b.st.Origins(t0.Add(time.Second)); len(o) != 0 {
		t.Fatalf("Origins = %v after expiry, want none", o)
	}
}

func TestForgetDropsOriginAndIgnoresItsLatePackets(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 5)
	report := a.st.Tick(t0)
	deliver(t, report, t0, b)

	b.st.Forget("a")
	if got, table := b.st.Remote(1), b.remote.get(1); got != 0 || table != 0 {
		t.Fatalf("after Forget: Remote(1) = %d, table = %d; want 0, 0", got, table)
	}
	deliver(t, report, t0, b) // a late copy
	if got := b.st.Remote(1); got != 0 {
		t.Fatalf("a late packet of a forgotten origin counted again: Remote(1) = %d", got)
	}
	now := t0.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b) // alive after all (a false death)
	if got := b.st.Remote(1); got != 5 {
		t.Fatalf("a newer report did not bring the origin back: Remote(1) = %d", got)
	}
}

func TestRemoteConvergesToZeroAfterTraffic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, b, c := newReplica(t, "a", nil), newReplica(t, "b", nil), newReplica(t, "c", nil)
	now := t0
	for range 200 {
		for _, r := range []*replica{a, b} {
			r.local.set(uint32(rng.IntN(64)), int64(rng.IntN(5)))
		}
		now = now.Add(DefaultLoadInterval)
		pa, pb := a.st.Tick(now), b.st.Tick(now)
		if rng.IntN(4) > 0 { // a quarter of the reports are lost
			deliver(t, pa, now, c)
		}
		if rng.IntN(4) > 0 {
			deliver(t, pb, now, c)
		}
	}
	for w := range uint32(64) {
		a.local.set(w, 0)
		b.local.set(w, 0)
	}
	now = now.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, c)
	deliver(t, b.st.Tick(now), now, c)

	sums, calls := c.remote.snapshot()
	if calls == 0 {
		t.Fatal("OnRemoteLoad never fired during traffic")
	}
	for w, n := range sums {
		if n != 0 {
			t.Errorf("OnRemoteLoad left worker %d at %d after all load ended", w, n)
		}
		if got := c.st.Remote(w); got != 0 {
			t.Errorf("Remote(%d) = %d after all load ended", w, got)
		}
	}
}

func TestOnRemoteLoadFiresOnlyOnChange(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 5)
	a.local.set(2, 1)
	now := t0
	deliver(t, a.st.Tick(now), now, b)
	_, before := b.remote.snapshot()
	for range 5 {
		now = now.Add(DefaultLoadInterval)
		deliver(t, a.st.Tick(now), now, b)
	}
	if _, after := b.remote.snapshot(); after != before {
		t.Fatalf("OnRemoteLoad fired %d times for unchanged reports", after-before)
	}
	a.local.set(2, 3)
	now = now.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	if _, after := b.remote.snapshot(); after != before+1 {
		t.Fatalf("OnRemoteLoad fired %d times for one changed worker, want 1", after-before)
	}
}

func TestOwnReportsAreIgnored(t *testing.T) {
	a := newReplica(t, "a", nil)
	a.local.set(1, 5)
	deliver(t, a.st.Tick(t0), t0, a)
	if got := a.st.Remote(1); got != 0 {
		t.Fatalf("a replica counted its own report: Remote(1) = %d", got)
	}
}

func TestLargeReportIsSplitIntoRangesUnderPacketLimit(t *testing.T) {
	const maxBytes = 300
	a := newReplica(t, "a", func(c *Config) { c.MaxPacketBytes = maxBytes })
	b := newReplica(t, "b", nil)
	for w := range uint32(5000) {
		a.local.set(w*3, int64(w%200+1))
	}
	pkts := a.st.Tick(t0)
	if len(pkts) < 10 {
		t.Fatalf("%d packets for 5000 workers at %d bytes each: not split", len(pkts), maxBytes)
	}
	for i, p := range pkts {
		if len(p) > maxBytes {
			t.Fatalf("packet %d is %d bytes, over %d", i, len(p), maxBytes)
		}
	}
	// Ranges of one report may arrive in any order.
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(pkts), func(i, j int) { pkts[i], pkts[j] = pkts[j], pkts[i] })
	deliver(t, pkts, t0, b)
	for w := range uint32(5000) {
		if got, want := b.st.Remote(w*3), int64(w%200+1); got != want {
			t.Fatalf("Remote(%d) = %d, want %d", w*3, got, want)
		}
	}
	// The next report drops most workers: absent within a range means zero.
	for w := range uint32(5000) {
		if w%100 != 0 {
			a.local.set(w*3, 0)
		}
	}
	now := t0.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b)
	if got := b.st.Remote(3 * 7); got != 0 {
		t.Fatalf("Remote(21) = %d after it left the report, want 0", got)
	}
	if got := b.st.Remote(3 * 100); got != 101 {
		t.Fatalf("Remote(300) = %d, want 101", got)
	}
}

func TestTickKeepsLoadIntervalCadence(t *testing.T) {
	a := newReplica(t, "a", nil)
	reports := 0
	for ms := range 10_000 { // a caller ticking every millisecond for 10 s
		if pkts := a.st.Tick(t0.Add(time.Duration(ms) * time.Millisecond)); len(pkts) > 0 {
			reports++
		}
	}
	if reports < 100 || reports > 101 {
		t.Fatalf("%d reports in 10 s of 1 ms ticks, want 100 (+1 for the first)", reports)
	}

	jittery := newReplica(t, "j", nil)
	now := t0
	for i := range 50 { // a ticker that fires up to 20 ms early or late
		now = t0.Add(time.Duration(i)*DefaultLoadInterval + time.Duration(i%5-2)*10*time.Millisecond)
		if pkts := jittery.st.Tick(now); len(pkts) == 0 {
			t.Fatalf("tick %d at %v produced no report", i, now.Sub(t0))
		}
	}
	if next := jittery.st.NextTick(); next.Before(now) {
		t.Fatalf("NextTick %v is before the last tick %v", next, now)
	}
}

func TestOriginsReportAgeAndLag(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	a.local.set(1, 2)
	a.local.set(4, 1)
	deliver(t, a.st.Tick(t0), t0.Add(3*time.Millisecond), b)
	got := b.st.Origins(t0.Add(50 * time.Millisecond))
	want := OriginStatus{Origin: "a", BootEpoch: 1, Seq: 1, Age: 47 * time.Millisecond, LastLag: 3 * time.Millisecond, Workers: 2}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Origins = %+v, want [%+v]", got, want)
	}
	lag := b.st.Lag()
	if lag.Samples != 1 || lag.P50 != 3*time.Millisecond || lag.P99 != 3*time.Millisecond {
		t.Fatalf("Lag = %+v, want one 3 ms sample", lag)
	}
}

func TestLagQuantiles(t *testing.T) {
	w := newLagWindow(100)
	for i := range 1000 { // only the last 100 (900..999 ms) stay in the window
		w.record(time.Duration(i) * time.Millisecond)
	}
	s := summarise(w.snapshot())
	if s.Samples != 1000 || s.P50 != 949*time.Millisecond || s.P99 != 998*time.Millisecond || s.Max != 999*time.Millisecond {
		t.Fatalf("summary = %+v", s)
	}
}

func TestPeerLoadsSplitsTheRemoteSumByOrigin(t *testing.T) {
	a, b, c := newReplica(t, "a", nil), newReplica(t, "b", nil), newReplica(t, "c", nil)
	b.local.set(1, 4)
	b.local.set(2, 10)
	c.local.set(2, 1)
	deliver(t, b.st.Tick(t0), t0, a)
	deliver(t, c.st.Tick(t0), t0, a)
	got := a.st.PeerLoads()
	if got["b"][1] != 4 || got["b"][2] != 10 || got["c"][2] != 1 || got["c"][1] != 0 || len(got) != 2 {
		t.Fatalf("PeerLoads = %v, want b: {1:4 2:10}, c: {2:1}", got)
	}
	got["b"][1] = 99 // a copy: the caller may change it
	a.st.Forget("c")
	if again := a.st.PeerLoads(); again["b"][1] != 4 || again["c"] != nil {
		t.Fatalf("PeerLoads after Forget(c) = %v, want only b with its own counts", again)
	}
}

// TestAChangedLoadIsReportedWithinTheFlushInterval: a replica whose loads
// changed reports them LoadFlushInterval after its last report, not a whole
// LoadInterval later; unchanged loads keep the LoadInterval cadence.
func TestAChangedLoadIsReportedWithinTheFlushInterval(t *testing.T) {
	a, b := newReplica(t, "a", nil), newReplica(t, "b", nil)
	deliver(t, a.st.Tick(t0), t0, b)
	a.local.set(1, 5)
	if pkts := a.st.Tick(t0.Add(DefaultLoadFlushInterval / 2)); len(pkts) != 0 {
		t.Fatalf("a change was reported %v after the last report, under the flush interval", DefaultLoadFlushInterval/2)
	}
	at := t0.Add(DefaultLoadFlushInterval)
	if next := a.st.NextTick(); next.After(at) {
		t.Fatalf("NextTick is %v after the last report, want at most the flush interval", next.Sub(t0))
	}
	deliver(t, a.st.Tick(at), at, b)
	if got := b.st.Remote(1); got != 5 {
		t.Fatalf("the peer sees %d in flight one flush interval after the change, want 5", got)
	}
	for now := at.Add(DefaultLoadFlushInterval); now.Before(at.Add(DefaultLoadInterval)); now = now.Add(DefaultLoadFlushInterval) {
		if pkts := a.st.Tick(now); len(pkts) != 0 {
			t.Fatalf("unchanged loads were reported again %v after the last report", now.Sub(at))
		}
	}
	if pkts := a.st.Tick(at.Add(DefaultLoadInterval)); len(pkts) == 0 {
		t.Fatal("no report one LoadInterval after the last")
	}
}

// TestABusyReplicaReportsAtMostOncePerFlushInterval: loads that change every
// millisecond cost one report per flush interval, and a flush interval of
// LoadInterval or more keeps the LoadInterval cadence.
func TestABusyReplicaReportsAtMostOncePerFlushInterval(t *testing.T) {
	for _, tc := range []struct {
		flush time.Duration
		want  int
	}{
		{DefaultLoadFlushInterval, int(time.Second / DefaultLoadFlushInterval)},
		{DefaultLoadInterval, int(time.Second / DefaultLoadInterval)},
	} {
		a := newReplica(t, "a", func(c *Config) { c.LoadFlushInterval = tc.flush })
		reports := 0
		for ms := range 1000 {
			a.local.set(1, int64(ms%7+1))
			if pkts := a.st.Tick(t0.Add(time.Duration(ms) * time.Millisecond)); len(pkts) > 0 {
				reports++
			}
		}
		if reports < tc.want || reports > tc.want+1 {
			t.Errorf("flush interval %v: %d reports in 1 s of changing loads, want %d (+1 for the first)", tc.flush, reports, tc.want)
		}
	}
}
