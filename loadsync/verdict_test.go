package loadsync

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// verdictBoard is a replica's own verdicts, as the health monitor keeps them.
type verdictBoard struct {
	mu  sync.Mutex
	own []Verdict
}

func (b *verdictBoard) set(vs ...Verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.own = vs
}

func (b *verdictBoard) read(dst []Verdict) []Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(dst, b.own...)
}

// heardVerdicts records what OnVerdicts reported, per origin.
type heardVerdicts struct {
	mu    sync.Mutex
	by    map[string][]Verdict
	calls int
}

func (h *heardVerdicts) store(origin string, vs []Verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string][]Verdict{}
	}
	if vs == nil {
		delete(h.by, origin)
	} else {
		h.by[origin] = vs
	}
	h.calls++
}

func (h *heardVerdicts) get(origin string) ([]Verdict, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[origin], h.calls
}

// verdictReplica is a replica whose verdicts are read from board and whose
// peers' verdicts land in heard.
type verdictReplica struct {
	*replica
	board *verdictBoard
	heard *heardVerdicts
}

func newVerdictReplica(t testing.TB, origin string, tweak func(*Config)) *verdictReplica {
	v := &verdictReplica{board: &verdictBoard{}, heard: &heardVerdicts{}}
	v.replica = newReplica(t, origin, func(c *Config) {
		c.LocalVerdicts, c.OnVerdicts = v.board.read, v.heard.store
		if tweak != nil {
			tweak(c)
		}
	})
	return v
}

var (
	wedged3   = Verdict{Worker: 3, Kind: 1, Since: t0.UnixNano()}
	degraded5 = Verdict{Worker: 5, Kind: 2, Since: t0.UnixNano()}
)

func TestVerdictsReachPeersAndAreWithdrawn(t *testing.T) {
	a, b := newVerdictReplica(t, "a", nil), newVerdictReplica(t, "b", nil)
	now := t0
	a.board.set(degraded5, wedged3, wedged3) // unsorted, with a duplicate
	deliver(t, a.st.Tick(now), now, b.replica)
	if got, _ := b.heard.get("a"); !slices.Equal(got, []Verdict{wedged3, degraded5}) {
		t.Fatalf("b holds %v for a, want wedged 3 and degraded 5 once each", got)
	}

	a.board.set()
	now = now.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b.replica)
	if got, _ := b.heard.get("a"); got != nil {
		t.Fatalf("b still holds %v after a withdrew them", got)
	}
}

func TestVerdictsRepeatWhileHeldAndStopAfterTheWithdrawal(t *testing.T) {
	a := newVerdictReplica(t, "a", nil)
	count := func(pkts [][]byte) (n int) {
		for _, p := range pkts {
			if p[0] == msgVerdicts {
				n++
			}
		}
		return n
	}
	now := t0
	if n := count(a.st.Tick(now)); n != 0 {
		t.Fatalf("a replica that never held verdicts sent %d verdict packets", n)
	}
	a.board.set(wedged3)
	for i := range 3 {
		now = now.Add(DefaultLoadInterval)
		if n := count(a.st.Tick(now)); n != 1 {
			t.Fatalf("tick %d with a verdict held sent %d verdict packets, want 1", i, n)
		}
	}
	a.board.set()
	var sent []int
	for range verdictWithdrawReports + 2 {
		now = now.Add(DefaultLoadInterval)
		sent = append(sent, count(a.st.Tick(now)))
	}
	if want := []int{1, 1, 1, 0, 0}; !slices.Equal(sent, want) {
		t.Fatalf("verdict packets per tick after the withdrawal = %v, want %v", sent, want)
	}
}

func TestReorderedOrDuplicateVerdictsAreIgnored(t *testing.T) {
	a, b := newVerdictReplica(t, "a", nil), newVerdictReplica(t, "b", nil)
	a.board.set(wedged3)
	first := a.st.Tick(t0)
	a.board.set()
	later := t0.Add(DefaultLoadInterval)
	second := a.st.Tick(later)

	deliver(t, second, later, b.replica)
	deliver(t, first, later, b.replica)  // older: would resurrect the verdict
	deliver(t, second, later, b.replica) // duplicate
	if got, calls := b.heard.get("a"); got != nil || calls != 0 {
		t.Fatalf("b holds %v after %d calls; the older report must not resurrect a withdrawn verdict", got, calls)
	}
}

func TestLostWithdrawalExpiresAfterTheTTL(t *testing.T) {
	a, b := newVerdictReplica(t, "a", nil), newVerdictReplica(t, "b", nil)
	a.board.set(wedged3)
	deliver(t, a.st.Tick(t0), t0, b.replica)
	// Every later packet of a is lost.
	b.st.Expire(t0.Add(DefaultLoadTTL))
	if got, _ := b.heard.get("a"); got == nil {
		t.Fatal("verdict dropped before the TTL")
	}
	b.st.Expire(t0.Add(DefaultLoadTTL + time.Millisecond))
	if got, _ := b.heard.get("a"); got != nil {
		t.Fatalf("verdict %v outlived its TTL", got)
	}
}

func TestForgottenOriginLosesItsVerdictsAndItsLateCopies(t *testing.T) {
	a, b := newVerdictReplica(t, "a", nil), newVerdictReplica(t, "b", nil)
	a.board.set(wedged3)
	pkts := a.st.Tick(t0)
	deliver(t, pkts, t0, b.replica)
	b.st.Forget("a")
	if got, _ := b.heard.get("a"); got != nil {
		t.Fatalf("b holds %v for a after forgetting it", got)
	}
	deliver(t, pkts, t0, b.replica) // a late copy
	if got, _ := b.heard.get("a"); got != nil {
		t.Fatalf("a late copy brought back %v", got)
	}
	now := t0.Add(DefaultLoadInterval)
	deliver(t, a.st.Tick(now), now, b.replica) // a is alive after all
	if got, _ := b.heard.get("a"); !slices.Equal(got, []Verdict{wedged3}) {
		t.Fatalf("a newer report did not bring a back: %v", got)
	}
}

func TestRestartedOriginReplacesItsVerdicts(t *testing.T) {
	old := newVerdictReplica(t, "a", func(c *Config) { c.BootEpoch = 100 })
	b := newVerdictReplica(t, "b", nil)
	old.board.set(wedged3)
	now := t0
	for range 20 {
		now = now.Add(DefaultLoadInterval)
		deliver(t, old.st.Tick(now), now, b.replica)
	}
	restarted := newVerdictReplica(t, "a", func(c *Config) { c.BootEpoch = 200 })
	restarted.board.set(degraded5)
	deliver(t, restarted.st.Tick(now), now, b.replica) // sequence 1 < 20, newer epoch
	if got, _ := b.heard.get("a"); !slices.Equal(got, []Verdict{degraded5}) {
		t.Fatalf("b holds %v, want the restarted process's verdicts", got)
	}
}

func TestVerdictsBeyondOnePacketAreCountedNotSent(t *testing.T) {
	a := newVerdictReplica(t, "a", func(c *Config) { c.MaxPacketBytes = minPacketBytes })
	b := newVerdictReplica(t, "b", nil)
	var many []Verdict
	for w := range uint32(200) {
		many = append(many, Verdict{Worker: w, Kind: 1, Since: t0.UnixNano()})
	}
	a.board.set(many...)
	pkts := a.st.Tick(t0)
	for _, p := range pkts {
		if len(p) > minPacketBytes {
			t.Fatalf("packet of %d bytes over the %d limit", len(p), minPacketBytes)
		}
	}
	deliver(t, pkts, t0, b.replica)
	got, _ := b.heard.get("a")
	unsent := a.st.Stats().VerdictsUnsent
	if len(got) == 0 || uint64(len(got))+unsent != 200 {
		t.Fatalf("%d verdicts arrived and %d were counted unsent; want them to add up to 200", len(got), unsent)
	}
}

func TestVerdictReportRoundTrip(t *testing.T) {
	rep := verdictReport{origin: "o", epoch: 7, seq: 9, verdicts: []Verdict{wedged3, {Worker: 1 << 31, Kind: 255, Since: -5}}}
	pkt, left := packVerdicts(rep, DefaultMaxPacketBytes)
	if left != 0 {
		t.Fatalf("%d verdicts left out of a roomy packet", left)
	}
	_, r, err := readHeader(pkt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeVerdictReport(&r)
	if err != nil || got.origin != "o" || got.epoch != 7 || got.seq != 9 || !slices.Equal(got.verdicts, rep.verdicts) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, rep)
	}
	if err := newReplica(t, "r", nil).st.Receive(pkt[:len(pkt)-1], t0); err == nil {
		t.Fatal("a truncated verdict packet was accepted")
	}
}
