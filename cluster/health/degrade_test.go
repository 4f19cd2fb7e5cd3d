package health

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

func degradeConfig() Config {
	cfg := testConfig()
	cfg.DegradeWindow = time.Minute
	cfg.DegradeMinSamples = 5
	cfg.DegradeRatio = 0.2
	cfg.CBTimeout = 2 * time.Minute
	cfg.CBSuccessThreshold = 2
	cfg.CBHalfOpenTrials = 5
	return cfg
}

// stream runs n concurrent streamed requests on worker id, each delivering
// tokens over d after its first byte, and ends them with a success.
func stream(t *testing.T, m *Monitor, clock *testingclock.FakeClock, id WorkerID, n, tokens int, d time.Duration) {
	t.Helper()
	as := make([]*Attempt, n)
	for i := range as {
		as[i] = begin(t, m, id)
		as[i].Progress(1)
	}
	clock.Step(d)
	for _, a := range as {
		a.Progress(tokens)
		a.End(OutcomeSuccess)
	}
}

func TestDegradedAgainstPeerMedian(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 4)...)
	stream(t, m, clock, 1, 5, 50, time.Second)    // 50 tok/s
	stream(t, m, clock, 2, 5, 45, time.Second)    // 45 tok/s
	stream(t, m, clock, 3, 5, 12, time.Second)    // 12 tok/s: slower, but above 0.2 x median
	stream(t, m, clock, 4, 5, 10, 10*time.Second) // 1 tok/s
	m.Tick()
	for id, want := range map[WorkerID]bool{1: false, 2: false, 3: false, 4: true} {
		st := status(t, m, id)
		if st.Degraded != want || m.Eligible(id) == want {
			t.Errorf("worker %d: degraded %v eligible %v, want degraded %v", id, st.Degraded, m.Eligible(id), want)
		}
	}
	if st := status(t, m, 4); st.Circuit != CircuitOpen {
		t.Errorf("degraded worker's circuit = %v, want open", st.Circuit)
	}
	if got := m.Verdicts(); len(got) != 1 || got[0].Worker != 4 || got[0].Kind != VerdictDegraded {
		t.Errorf("Verdicts() = %v, want worker 4 degraded", got)
	}
}

func TestDegradedAgainstItsOnlyPeer(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 2)...)
	stream(t, m, clock, 1, 5, 60, time.Second) // 60 tok/s
	stream(t, m, clock, 2, 5, 10, time.Second) // 10 tok/s: below 0.2 x 60, not below 0.2 x median(10, 60)
	m.Tick()
	if !status(t, m, 2).Degraded || status(t, m, 1).Degraded {
		t.Fatalf("worker at 1/6 of its only peer's rate: degraded %v, peer degraded %v; want true, false",
			status(t, m, 2).Degraded, status(t, m, 1).Degraded)
	}
}

func TestDegradeNeedsMinSamples(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 3)...)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 4, 10, 10*time.Second)
	m.Tick()
	if status(t, m, 3).Degraded {
		t.Fatal("worker judged on 4 samples with DegradeMinSamples 5")
	}
	stream(t, m, clock, 3, 1, 10, 10*time.Second)
	m.Tick()
	if !status(t, m, 3).Degraded {
		t.Fatal("slow worker with 5 samples not judged degraded")
	}
}

func TestDegradeNeedsAPeer(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 1)...)
	stream(t, m, clock, 1, 5, 10, 10*time.Second)
	m.Tick()
	if status(t, m, 1).Degraded {
		t.Fatal("a worker without judged peers was judged degraded")
	}
}

func TestDegradeComparesOnlySameGroup(t *testing.T) {
	ts := targets(t, 4)
	ts[0].Group, ts[1].Group = "big-model", "big-model"
	ts[2].Group, ts[3].Group = "small-model", "small-model"
	m, clock := newTestMonitor(t, degradeConfig(), ts...)
	stream(t, m, clock, 1, 5, 10, 2*time.Second) // 5 tok/s
	stream(t, m, clock, 2, 5, 12, 2*time.Second) // 6 tok/s
	stream(t, m, clock, 3, 5, 100, time.Second)  // 100 tok/s
	stream(t, m, clock, 4, 5, 90, time.Second)   // 90 tok/s
	m.Tick()
	for _, st := range m.Statuses() {
		if st.Degraded {
			t.Errorf("worker %d judged degraded against another group", st.ID)
		}
	}
}

// fleet starts n loopback workers and returns them with their targets, ids
// 1..n, all in one group.
func fleet(t *testing.T, n int) ([]Target, []*fakeWorker) {
	ts := make([]Target, n)
	fws := make([]*fakeWorker, n)
	for i := range ts {
		fws[i] = startFakeWorker(t)
		ts[i] = Target{ID: WorkerID(i + 1), URL: fws[i].url, Model: "m"}
	}
	return ts, fws
}

// degradeWorker3 makes worker 3 of a 3-worker fleet degraded and returns the
// clock at the verdict.
func degradeWorker3(t *testing.T, m *Monitor, clock *testingclock.FakeClock) {
	t.Helper()
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 5, 10, 10*time.Second)
	m.Tick()
	if !status(t, m, 3).Degraded {
		t.Fatal("slow worker not degraded")
	}
}

// recoveryRound lets the next recovery probe fall due, and sends it.
func recoveryRound(m *Monitor, clock *testingclock.FakeClock, wait time.Duration) {
	clock.Step(wait)
	m.Tick()
	tasksRound(m)
}

func TestDegradedComesBackWhenItsProbeMatchesAPeers(t *testing.T) {
	ts, fws := fleet(t, 3)
	m, clock := newTestMonitor(t, degradeConfig(), ts...)
	degradeWorker3(t, m, clock)
	fws[2].genDelay.Store(int64(200 * time.Millisecond)) // the engine is still slow
	recoveryRound(m, clock, recoveryBase)
	if st := status(t, m, 3); !st.Degraded || st.Circuit != CircuitOpen || fws[2].generated.Load() != 1 {
		t.Fatalf("after a recovery probe 200ms slower than its peer's: %+v, %d probes; want degraded and open",
			st, fws[2].generated.Load())
	}
	if fws[0].generated.Load()+fws[1].generated.Load() != 1 {
		t.Fatal("the degraded worker's probe was not measured against one healthy peer's")
	}
	clock.Step(time.Hour) // its samples age out: without traffic, that proves nothing
	m.Tick()
	if st := status(t, m, 3); !st.Degraded || st.Circuit != CircuitOpen {
		t.Fatalf("an hour without samples lifted the degrade verdict: %+v", st)
	}
	fws[2].genDelay.Store(0) // the engine recovered
	recoveryRound(m, clock, recoveryCeiling)
	if st := status(t, m, 3); st.Degraded || st.Circuit != CircuitHalfOpen || !m.Eligible(3) {
		t.Fatalf("after a probe as fast as its peer's: %+v, want not degraded, half_open, eligible", st)
	}
	stream(t, m, clock, 3, 2, 40, time.Second)
	if st := status(t, m, 3); st.Circuit != CircuitClosed || !m.Eligible(3) {
		t.Fatalf("after trials at a normal rate: %+v, want closed and eligible", st)
	}
}

func TestSlowTrialRenewsTheDegradeVerdict(t *testing.T) {
	ts, _ := fleet(t, 3)
	m, clock := newTestMonitor(t, degradeConfig(), ts...)
	degradeWorker3(t, m, clock)
	stream(t, m, clock, 1, 5, 50, time.Second) // keep the peers' yardstick fresh
	stream(t, m, clock, 2, 5, 50, time.Second)
	recoveryRound(m, clock, recoveryBase) // loopback probes are equally fast
	if got := status(t, m, 3).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit = %v, want half_open", got)
	}
	stream(t, m, clock, 3, 1, 10, 10*time.Second)
	st := status(t, m, 3)
	if st.Circuit != CircuitOpen || !st.Degraded {
		t.Fatalf("a trial answering at 1 tok/s against peers' 50: %+v, want open and degraded again", st)
	}
	if v := m.Verdicts(); len(v) != 1 || v[0].Kind != VerdictDegraded {
		t.Fatalf("Verdicts() = %v, want the renewed degrade verdict to be shared", v)
	}
}

func TestDegradeLiftsWithItsSamplesWhenProbesAreRefused(t *testing.T) {
	ts, fws := fleet(t, 3)
	m, clock := newTestMonitor(t, degradeConfig(), ts...)
	degradeWorker3(t, m, clock)
	fws[2].genCode.Store(fasthttp.StatusNotFound)
	recoveryRound(m, clock, recoveryBase)
	clock.Step(m.cfg.DegradeWindow)
	m.Tick()
	if st := status(t, m, 3); st.Degraded {
		t.Fatalf("a worker refusing recovery probes stayed degraded after its samples aged out: %+v", st)
	}
	clock.Step(m.cfg.CBTimeout)
	m.Tick()
	if got := status(t, m, 3).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit CBTimeout after opening = %v, want half_open", got)
	}
}

func TestShortAnswersGiveNoRateSample(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 3)...)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 5, minRateTokens-1, 10*time.Second)
	for range 5 { // non-streamed: tokens arrive with the first byte
		a := begin(t, m, 3)
		clock.Step(10 * time.Second)
		a.Progress(500)
		a.End(OutcomeSuccess)
	}
	m.Tick()
	if status(t, m, 3).Degraded {
		t.Fatal("rates measured on too few tokens judged the worker degraded")
	}
}

func TestMedianExcludingMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := rng.IntN(9)
		sorted := make([]float64, n)
		for i := range sorted {
			sorted[i] = float64(rng.IntN(20))
		}
		slices.Sort(sorted)
		for skip := -1; skip < n; skip++ {
			rest := slices.Clone(sorted)
			if skip >= 0 {
				rest = slices.Delete(rest, skip, skip+1)
			}
			want := naiveMedian(rest)
			got := medianExcluding(sorted, skip)
			if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("medianExcluding(%v, %d) = %v, want %v", sorted, skip, got, want)
			}
		}
	}
}

func naiveMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func TestRateWindowKeepsLatestSamples(t *testing.T) {
	var r rateWindow
	for i := range rateWindowSize + 10 {
		r.add(int64(i), float64(i))
	}
	med, n, _ := r.median(0, nil)
	lo, hi := float64(10), float64(rateWindowSize+9)
	if n != rateWindowSize || med != (lo+hi)/2 {
		t.Fatalf("median of the latest %d samples = %v (of %d), want %v", rateWindowSize, med, n, (lo+hi)/2)
	}
	if _, n, _ := r.median(int64(rateWindowSize+5), nil); n != 5 {
		t.Fatalf("samples within the window: %d, want 5", n)
	}
}
