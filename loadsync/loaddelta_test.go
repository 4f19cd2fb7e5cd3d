package loadsync

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// busy gives replica r n workers with distinct counts, so that a full
// report is far larger than a delta of a few of them.
func busy(r *replica, n int) {
	for w := range uint32(n) {
		r.local.set(w, int64(w%5)+1)
	}
}

// ticker drives one sender's Tick at LoadInterval steps.
type ticker struct {
	r   *replica
	now time.Time
}

func (tk *ticker) tick() [][]byte {
	tk.now = tk.now.Add(DefaultLoadInterval)
	return tk.r.st.Tick(tk.now)
}

// equalsLocal fails unless b's view of a is exactly a's own counts.
func equalsLocal(t *testing.T, what string, a, b *replica, workers int) {
	t.Helper()
	for w := range uint32(workers + 2) {
		want := a.local.get(w)
		if got := b.st.Remote(w); got != want {
			t.Fatalf("%s: Remote(%d) = %d, want %d", what, w, got, want)
		}
	}
}

func (l *localLoads) get(w uint32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loads[w]
}

// kinds counts the packets of a full report and of deltas (cumulative or
// steps) among pkts, in either encoding.
func kinds(pkts [][]byte) (full, delta int) {
	for _, p := range pkts {
		switch {
		case p[0] == msgLoad || hasSection(p, secLoadFull, secLoadFullDense):
			full++
		case isDelta(p):
			delta++
		}
	}
	return full, delta
}

func isDelta(p []byte) bool {
	return p[0] == msgLoadDelta || hasSection(p, secLoadDelta, secLoadStep) && !hasSection(p, secLoadFull, secLoadFullDense)
}

func hasSection(p []byte, kinds ...byte) bool {
	for _, k := range sectionKinds(&testing.T{}, p) {
		if slices.Contains(kinds, k) {
			return true
		}
	}
	return false
}

// wanted keeps the packets r wants, as Gossip would send them.
func wanted(r *replica, pkts [][]byte) [][]byte {
	var out [][]byte
	for _, p := range pkts {
		if r.reads.wants(p[0]) {
			out = append(out, p)
		}
	}
	return out
}

// pair is a sender a and a receiver b that reads msgReport, or, legacy,
// only the types of the builds before it.
func pair(t *testing.T, legacy bool, tweakA func(*Config)) (a, b *replica) {
	a, b = newReplica(t, "a", tweakA), newReplica(t, "b", nil)
	if legacy {
		asLegacy(b, a)
	}
	return a, b
}

// busyPair is pair with workers busy workers at a, ticked from t0.
func busyPair(t *testing.T, legacy bool, workers int) (a, b *replica, tk *ticker) {
	a, b = pair(t, legacy, nil)
	busy(a, workers)
	return a, b, &ticker{r: a, now: t0}
}

// settledPair is busyPair after b heard a's full report and its copy: b's
// view of a is exact.
func settledPair(t *testing.T, legacy bool, workers int) (a, b *replica, tk *ticker) {
	a, b, tk = busyPair(t, legacy, workers)
	deliver(t, tk.tick(), tk.now, b)
	deliver(t, tk.tick(), tk.now, b)
	return a, b, tk
}

// bothEncodings runs test against a receiver of msgReport and one of the
// older types.
func bothEncodings(t *testing.T, test func(t *testing.T, legacy bool)) {
	t.Run("report", func(t *testing.T) { test(t, false) })
	t.Run("older types", func(t *testing.T) { test(t, true) })
}

func TestDeltaCarriesOnlyTheChangedCounts(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := busyPair(t, legacy, 500)
		first := wanted(b, tk.tick())
		if f, d := kinds(first); f == 0 || d != 0 {
			t.Fatalf("the first report is %d full and %d delta packets, want full only", f, d)
		}
		deliver(t, first, tk.now, b)
		deliver(t, tk.tick(), tk.now, b) // the full report again, and an empty delta
		a.local.set(7, 40)
		a.local.set(9, 0)
		a.local.set(600, 2)
		pkts := wanted(b, tk.tick())
		if f, d := kinds(pkts); f != 0 || d != 1 {
			t.Fatalf("a report after three changes is %d full and %d delta packets, want one delta", f, d)
		}
		if len(pkts[0]) > 40 {
			t.Fatalf("the delta of three changes is %d bytes", len(pkts[0]))
		}
		deliver(t, pkts, tk.now, b)
		equalsLocal(t, "after the delta", a, b, 600)
	})
}

func TestLostDeltasAreRepairedByTheNextOne(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := settledPair(t, legacy, 100)
		a.local.set(3, 50) // changed, then back to its base value while lost
		deliver(t, tk.tick(), tk.now, b)
		a.local.set(3, 4)
		a.local.set(5, 0)
		_ = tk.tick() // lost
		a.local.set(8, 9)
		_ = tk.tick() // lost
		deliver(t, tk.tick(), tk.now, b)
		equalsLocal(t, "after two lost deltas", a, b, 100)
		if st := b.st.Stats(); st.DeltasInexact != 0 {
			t.Fatalf("%d deltas merged inexact while the base was held", st.DeltasInexact)
		}
	})
}

func TestReorderedDeltaIsIgnored(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := settledPair(t, legacy, 50)
		a.local.set(1, 30)
		older := tk.tick()
		a.local.set(1, 31)
		a.local.set(2, 0)
		newer := tk.tick()
		deliver(t, newer, tk.now, b)
		deliver(t, older, tk.now, b)
		deliver(t, newer, tk.now, b)
		equalsLocal(t, "after newer, older, newer again", a, b, 50)
	})
}

func TestDeltaAheadOfItsBaseIsMergedAndTheBaseStillCounts(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := busyPair(t, legacy, 50)
		full := tk.tick()
		a.local.set(4, 20)
		second := tk.tick() // the full report again and a delta on it
		var delta [][]byte
		for _, p := range second {
			if isDelta(p) && b.reads.wants(p[0]) {
				delta = append(delta, p)
			}
		}
		deliver(t, delta, tk.now, b) // overtakes both copies of its base
		if got := b.st.Remote(4); got != 20 {
			t.Fatalf("Remote(4) = %d from a delta without its base, want its count 20", got)
		}
		if st := b.st.Stats(); st.DeltasInexact != 1 {
			t.Fatalf("DeltasInexact = %d, want 1", st.DeltasInexact)
		}
		deliver(t, full, tk.now, b) // the base, late
		if got := b.st.Remote(4); got != 20 {
			t.Fatalf("Remote(4) = %d: the late base overwrote the newer delta's count", got)
		}
		equalsLocal(t, "after the late base", a, b, 50)
		a.local.set(4, 1) // its base value: the next delta omits it
		deliver(t, tk.tick(), tk.now, b)
		equalsLocal(t, "after the next delta", a, b, 50)
	})
}

// TestLostFullReportIsRepairedWithinTheFullInterval loses every copy of a
// full report: the deltas on it still bring the counts they carry, and the
// view is exact again once the next full report has arrived.
func TestLostFullReportIsRepairedWithinTheFullInterval(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := settledPair(t, legacy, 50)
		perFull := int(DefaultFullReportInterval / DefaultLoadInterval)
		for range perFull - 2 { // up to the next full report
			deliver(t, tk.tick(), tk.now, b)
		}
		a.local.set(10, 0) // changed in the lost full report, never again
		lost := tk.tick()
		if f, _ := kinds(lost); f == 0 {
			t.Fatal("the report after a full interval is not a full report")
		}
		a.local.set(11, 77)
		_ = tk.tick() // its copy, lost too, with the first delta
		a.local.set(12, 66)
		for i := range perFull - 2 {
			deliver(t, tk.tick(), tk.now, b)
			if i == 0 {
				if got := b.st.Remote(12); got != 66 {
					t.Fatalf("Remote(12) = %d: a delta without its base was not merged", got)
				}
				if got := b.st.Remote(10); got == 0 {
					t.Fatal("the view is exact without the base it lost: the test does not test")
				}
			}
		}
		deliver(t, tk.tick(), tk.now, b) // the next full report
		equalsLocal(t, "after the next full report", a, b, 50)
	})
}

// TestDeltaViewMatchesTheOriginUnderLossAndReordering runs an origin with
// random changes through a network that loses, duplicates and reorders
// deltas (full reports arrive, late at times), and checks after every
// delivery that the receiver's view is the origin's counts as of the
// newest report it merged exactly.
func TestDeltaViewMatchesTheOriginUnderLossAndReordering(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		rng := rand.New(rand.NewPCG(11, 12))
		a, b, tk := busyPair(t, legacy, 200)
		truth := map[uint64]map[uint32]int64{} // seq -> a's counts then
		var delayed [][]byte
		exactChecks := 0
		for range 2000 {
			for range rng.IntN(6) {
				a.local.set(uint32(rng.IntN(220)), int64(rng.IntN(4)))
			}
			pkts := tk.tick()
			truth[a.st.reports.seq] = a.local.snapshot()
			for _, p := range pkts {
				switch {
				case isDelta(p) && rng.IntN(4) == 0: // lost
				case rng.IntN(5) == 0:
					delayed = append(delayed, p)
				default:
					deliver(t, [][]byte{p}, tk.now, b)
					if rng.IntN(10) == 0 {
						deliver(t, [][]byte{p}, tk.now, b) // duplicated
					}
				}
			}
			if len(delayed) > 0 && rng.IntN(3) == 0 { // the late ones, oldest last
				for i := len(delayed) - 1; i >= 0; i-- {
					deliver(t, delayed[i:i+1], tk.now, b)
				}
				delayed = delayed[:0]
			}
			o := b.st.peers.loads.origins["a"]
			if o == nil || o.exactAt != tk.now.UnixNano() {
				continue // this tick's report was not merged exactly
			}
			exactChecks++
			want := truth[o.seq]
			for w := range uint32(220) {
				if got := b.st.Remote(w); got != want[w] {
					t.Fatalf("seq %d: Remote(%d) = %d, want %d", o.seq, w, got, want[w])
				}
			}
		}
		if exactChecks < 1000 {
			t.Fatalf("only %d of 2000 ticks ended exact", exactChecks)
		}
	})
}

func (l *localLoads) snapshot() map[uint32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := maps.Clone(l.loads)
	maps.DeleteFunc(out, func(_ uint32, n int64) bool { return n == 0 })
	return out
}

func TestEveryReportIsFullWhenTheFullIntervalIsOneInterval(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) { c.FullReportInterval = DefaultLoadInterval })
	busy(a, 100)
	tk := &ticker{r: a, now: t0}
	for i := range 20 {
		a.local.set(uint32(i), 9)
		if f, d := kinds(tk.tick()); f == 0 || d != 0 {
			t.Fatalf("report %d: %d full and %d delta packets, want full only", i, f, d)
		}
	}
}

// TestBadLoadPacketsAreRefusedAndChangeNothing feeds a receiver that holds
// a view of "a" with packets that must be refused, and checks that the
// view is untouched.
func TestBadLoadPacketsAreRefusedAndChangeNothing(t *testing.T) {
	bothEncodings(t, func(t *testing.T, legacy bool) {
		a, b, tk := settledPair(t, legacy, 20)
		a.local.set(3, 8)
		good := wanted(b, tk.tick())[0]

		delta := func(seq, back uint64, entries ...WorkerLoad) []byte {
			d := loadDelta{origin: "a", epoch: 1, seq: seq, base: seq - back, sentAt: tk.now.UnixNano(), entries: entries}
			return appendLoadDelta(nil, &d)
		}
		huge := appendLoadDelta(nil, &loadDelta{origin: "a", epoch: 1, seq: 9, base: 1, entries: []WorkerLoad{{Worker: 3, InFlight: 1}}})
		huge = huge[:len(huge)-1]
		huge = appendUvarintBytes(huge, maxInFlight+1)
		bad := map[string][]byte{
			"truncated delta":         good[:len(good)-1],
			"base at its own seq":     delta(9, 0),
			"base before seq 1":       delta(9, 10),
			"count over the bound":    huge,
			"oversized packet":        oversizedFull(),
			"workers out of order":    corruptGap(delta(9, 8, WorkerLoad{Worker: 2, InFlight: 1}, WorkerLoad{Worker: math.MaxUint32, InFlight: 1})),
			"full report, count huge": fullWithCount(maxInFlight + 1),
		}
		beforeOrigins := b.st.Origins(tk.now)
		for name, p := range bad {
			if err := b.st.Receive(p, tk.now); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: Receive = %v, want ErrMalformed", name, err)
			}
		}
		for w := range uint32(22) {
			if got, want := b.st.Remote(w), a.local.get(w); w != 3 && got != want || w == 3 && got != 4 {
				t.Fatalf("a refused packet changed Remote(%d) to %d", w, got)
			}
		}
		if got := b.st.Origins(tk.now); len(got) != 1 || got[0] != beforeOrigins[0] {
			t.Fatalf("a refused packet changed the origin: %+v, was %+v", got, beforeOrigins)
		}
		deliver(t, [][]byte{good}, tk.now, b) // the real one still counts
		equalsLocal(t, "after the good delta", a, b, 20)
	})
}

func appendUvarintBytes(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// corruptGap makes the last entry's gap reach past the top of the id space.
func corruptGap(p []byte) []byte {
	// The last entry is (gap to MaxUint32, 1): its gap is 5 bytes.
	out := append([]byte(nil), p[:len(p)-6]...)
	out = appendUvarintBytes(out, math.MaxUint32)
	return append(out, 1)
}

func fullWithCount(n uint64) []byte {
	p := appendLoadReport(nil, &loadReport{origin: "a", epoch: 1, seq: 99, lo: 0, hi: math.MaxUint32,
		entries: []WorkerLoad{{Worker: 3, InFlight: 1}}})
	return appendUvarintBytes(p[:len(p)-1], n)
}

// oversizedFull is a well-formed full report of more bytes than any packet
// may hold.
func oversizedFull() []byte {
	entries := make([]WorkerLoad, 40000)
	for i := range entries {
		entries[i] = WorkerLoad{Worker: uint32(i), InFlight: 1}
	}
	return appendLoadReport(nil, &loadReport{origin: "a", epoch: 1, seq: 99, hi: math.MaxUint32, entries: entries})
}
