package health

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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
func stream(t *testing.T, m *Monitor, clock *FakeClock, id WorkerID, n, tokens int, d time.Duration) {
	t.Helper()
	as := make([]*Attempt, n)
	for i := range as {
		as[i] = begin(t, m, id)
		as[i].Progress(1)
	}
	clock.Advance(d)
	for _, a := range as {
		a.Progress(tokens)
		a.End(OutcomeSuccess)
	}
}

func TestDegradedAgainstPeerMedian(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(4)...)
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
	m, clock := newTestMonitor(t, degradeConfig(), targets(2)...)
	stream(t, m, clock, 1, 5, 60, time.Second) // 60 tok/s
	stream(t, m, clock, 2, 5, 10, time.Second) // 10 tok/s: below 0.2 x 60, not below 0.2 x median(10, 60)
	m.Tick()
	if !status(t, m, 2).Degraded || status(t, m, 1).Degraded {
		t.Fatalf("worker at 1/6 of its only peer's rate: degraded %v, peer degraded %v; want true, false",
			status(t, m, 2).Degraded, status(t, m, 1).Degraded)
	}
}

func TestDegradeNeedsMinSamples(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(3)...)
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
	m, clock := newTestMonitor(t, degradeConfig(), targets(1)...)
	stream(t, m, clock, 1, 5, 10, 10*time.Second)
	m.Tick()
	if status(t, m, 1).Degraded {
		t.Fatal("a worker without judged peers was judged degraded")
	}
}

func TestDegradeComparesOnlySameGroup(t *testing.T) {
	ts := targets(4)
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

func TestDegradedRecoversThroughNormalTrials(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(3)...)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 5, 10, 10*time.Second)
	m.Tick()
	if !status(t, m, 3).Degraded {
		t.Fatal("slow worker not degraded")
	}
	stream(t, m, clock, 1, 5, 50, time.Second) // peers keep their samples fresh
	stream(t, m, clock, 2, 5, 50, time.Second)
	clock.Advance(time.Minute)
	m.Tick()
	if st := status(t, m, 3); st.Degraded || st.Circuit != CircuitOpen {
		t.Fatalf("after its samples aged out: %+v, want not degraded, circuit still open", st)
	}
	clock.Advance(2 * time.Minute)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	m.Tick()
	if got := status(t, m, 3).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit CBTimeout after opening = %v, want half_open", got)
	}
	stream(t, m, clock, 3, 2, 40, time.Second)
	if st := status(t, m, 3); st.Circuit != CircuitClosed || !m.Eligible(3) {
		t.Fatalf("after trials at a normal rate: %+v, want closed and eligible", st)
	}
}

func TestSlowTrialReopensCircuit(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(3)...)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 5, 10, 10*time.Second)
	m.Tick()
	clock.Advance(2 * time.Minute)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	m.Tick()
	if got := status(t, m, 3).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit = %v, want half_open", got)
	}
	stream(t, m, clock, 3, 1, 10, 10*time.Second)
	if got := status(t, m, 3).Circuit; got != CircuitOpen {
		t.Fatalf("a trial answering at 1 tok/s against peers' 50 left the circuit %v, want open", got)
	}
}

func TestShortAnswersGiveNoRateSample(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(3)...)
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	stream(t, m, clock, 3, 5, minRateTokens-1, 10*time.Second)
	for range 5 { // non-streamed: tokens arrive with the first byte
		a := begin(t, m, 3)
		clock.Advance(10 * time.Second)
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
	med, _, ok := r.median(0, 1, nil)
	lo, hi := float64(10), float64(rateWindowSize+9)
	if !ok || med != (lo+hi)/2 {
		t.Fatalf("median of the latest %d samples = %v (ok %v), want %v", rateWindowSize, med, ok, (lo+hi)/2)
	}
	if _, _, ok := r.median(int64(rateWindowSize+5), 5, nil); !ok {
		t.Fatal("5 samples within the window not counted")
	}
	if _, _, ok := r.median(int64(rateWindowSize+6), 5, nil); ok {
		t.Fatal("samples older than the window counted")
	}
}
