package health

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

func wedgeConfig() Config {
	cfg := testConfig()
	cfg.WedgeTimeout = 60 * time.Second
	cfg.CBTimeout = 30 * time.Second
	cfg.CBSuccessThreshold = 2
	return cfg
}

func TestWedgeDetectedAfterTimeoutWithSilentInflight(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 2)...)
	changes := changeCounter(m)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	clock.Step(59 * time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || !m.Eligible(1) {
		t.Fatalf("wedged after 59s of a 60s timeout: %+v", st)
	}
	clock.Step(time.Second)
	m.Tick()
	st := status(t, m, 1)
	if !st.Wedged || st.Circuit != CircuitOpen || m.Eligible(1) {
		t.Fatalf("after 60s silent with a request in flight: %+v, want wedged, open, ineligible", st)
	}
	if changes.Load() != 1 {
		t.Fatalf("OnChange calls = %d, want 1", changes.Load())
	}
	want := []Verdict{{Worker: 1, Kind: VerdictWedged, Since: t0.Add(60 * time.Second)}}
	if got := m.Verdicts(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("Verdicts() = %v, want %v", got, want)
	}
	if !m.Eligible(2) || status(t, m, 2).Wedged {
		t.Fatal("an idle peer was judged with the wedged worker")
	}
}

func TestWedgeLiftsWhenProgressReturnsAndHalfOpensAtOnce(t *testing.T) {
	cfg := wedgeConfig()
	cfg.CBTimeout = time.Hour
	m, clock := newTestMonitor(t, cfg, targets(t, 1)...)
	stuck := begin(t, m, 1)
	clock.Step(time.Minute)
	m.Tick()
	if !status(t, m, 1).Wedged {
		t.Fatal("not wedged after WedgeTimeout")
	}
	clock.Step(10 * time.Second)
	stuck.Progress(1)
	m.Tick()
	st := status(t, m, 1)
	if st.Wedged || len(m.Verdicts()) != 0 {
		t.Fatalf("wedge verdict survived returning progress: %+v verdicts %v", st, m.Verdicts())
	}
	if st.Circuit != CircuitHalfOpen || !m.Eligible(1) {
		t.Fatalf("progress came back: %+v, want half_open and eligible now, not after CBTimeout", st)
	}
	stuck.End(OutcomeSuccess)
	for range 2 {
		a := begin(t, m, 1)
		clock.Step(time.Second)
		a.Progress(1)
		a.End(OutcomeSuccess)
	}
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("circuit after progressing trials = %v, want closed", got)
	}
}

func TestWedgeHoldsAfterItsAttemptsAreGivenUp(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	stuck := begin(t, m, 1)
	clock.Step(time.Minute)
	m.Tick()
	stuck.End(OutcomeCanceled) // the proxy failed it over
	clock.Step(5 * time.Minute)
	m.Tick()
	if st := status(t, m, 1); !st.Wedged || st.Circuit != CircuitOpen || m.Eligible(1) {
		t.Fatalf("a wedged worker whose requests were cancelled: %+v, want still wedged and open: "+
			"nothing has shown it works again", st)
	}
}

func TestWedgeHoldsCircuitOpenPastCBTimeout(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	clock.Step(time.Minute)
	m.Tick()
	clock.Step(5 * time.Minute)
	m.Tick()
	if st := status(t, m, 1); !st.Wedged || st.Circuit != CircuitOpen {
		t.Fatalf("still silent long after CBTimeout: %+v, want wedged and open", st)
	}
}

func TestNoWedgeWithoutInflight(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	clock.Step(time.Hour)
	m.Tick()
	finish(t, m, 1, 3, OutcomeSuccess)
	clock.Step(time.Hour)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || !m.Eligible(1) {
		t.Fatalf("idle worker judged wedged: %+v", st)
	}
}

func TestIdleGapDoesNotCountAsSilence(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	finish(t, m, 1, 1, OutcomeSuccess)
	clock.Step(time.Hour)
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	clock.Step(time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Wedged {
		t.Fatalf("request 1s old on a worker idle for an hour judged wedged: %+v", st)
	}
}

func TestStreamChunksKeepWorkerAlive(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	for range 10 {
		clock.Step(50 * time.Second)
		a.Progress(3)
		m.Tick()
	}
	if st := status(t, m, 1); st.Wedged {
		t.Fatalf("worker streaming a chunk every 50s judged wedged: %+v", st)
	}
}

func TestFailuresWithoutProgressStillWedge(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	for range 6 {
		clock.Step(10 * time.Second)
		finish(t, m, 1, 1, OutcomeCanceled)
	}
	m.Tick()
	if !status(t, m, 1).Wedged {
		t.Fatal("cancelled requests passed for progress while another hung")
	}
}

func TestHeadersAndBodyReadsKeepWorkerAlive(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	for range 10 {
		clock.Step(50 * time.Second)
		a.Progress(0) // headers, then body reads that carry no counted token
		m.Tick()
	}
	if st := status(t, m, 1); st.Wedged || isClosed(a.Stuck()) {
		t.Fatalf("attempt reading a byte every 50s judged wedged: %+v, stuck %v", st, isClosed(a.Stuck()))
	}
}

func TestStuckClosesWhenWorkerIsJudgedWedged(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 2)...)
	early := begin(t, m, 1)
	defer early.End(OutcomeCanceled)
	other := begin(t, m, 2)
	defer other.End(OutcomeSuccess)
	clock.Step(30 * time.Second)
	late := begin(t, m, 1) // silent for only half the timeout when the worker is judged
	defer late.End(OutcomeCanceled)
	other.Progress(1)
	m.Tick()
	if isClosed(early.Stuck()) || isClosed(late.Stuck()) {
		t.Fatal("Stuck closed before the worker was judged wedged")
	}
	clock.Step(30 * time.Second)
	other.Progress(1)
	m.Tick()
	if !status(t, m, 1).Wedged {
		t.Fatal("worker silent for WedgeTimeout not wedged")
	}
	if !isClosed(early.Stuck()) || !isClosed(late.Stuck()) {
		t.Fatalf("attempts on a wedged worker not told to give up: stuck %v %v", isClosed(early.Stuck()), isClosed(late.Stuck()))
	}
	if isClosed(other.Stuck()) {
		t.Fatal("an attempt on a progressing worker was told to give up")
	}
}

func TestStuckClosesForASilentAttemptOnABusyWorker(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	silent := begin(t, m, 1)
	defer silent.End(OutcomeCanceled)
	streaming := begin(t, m, 1)
	defer streaming.End(OutcomeSuccess)
	for range 5 {
		clock.Step(10 * time.Second)
		streaming.Progress(2)
		m.Tick()
	}
	if isClosed(silent.Stuck()) {
		t.Fatal("attempt silent for 50s of a 60s timeout told to give up")
	}
	clock.Step(10 * time.Second)
	streaming.Progress(2)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || !isClosed(silent.Stuck()) || isClosed(streaming.Stuck()) {
		t.Fatalf("one attempt silent for WedgeTimeout on a streaming worker: wedged %v, stuck %v, "+
			"streaming stuck %v; want only the silent attempt given up", st.Wedged, isClosed(silent.Stuck()), isClosed(streaming.Stuck()))
	}
}

func TestStuckClosesWhenWorkerHangs(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := wedgeConfig()
	cfg.FailureThreshold = 2
	m, _ := newTestMonitor(t, cfg, Target{ID: 1, URL: fw.url})
	unheard := begin(t, m, 1)
	defer unheard.End(OutcomeCanceled)
	heard := begin(t, m, 1)
	defer heard.End(OutcomeSuccess)
	heard.Progress(0)
	fw.code.Store(fasthttp.StatusServiceUnavailable)
	checkRound(t, m)
	if isClosed(unheard.Stuck()) {
		t.Fatal("one failed probe of two made an attempt give up")
	}
	checkRound(t, m)
	if !isClosed(unheard.Stuck()) {
		t.Fatal("an attempt that heard nothing from a worker that failed its health checks was not given up")
	}
	if isClosed(heard.Stuck()) {
		t.Fatal("an attempt that already has the worker's answer under way was given up")
	}
}

// engineWorker is a monitor watching one loopback worker whose /metrics the
// test drives, with tasks run by hand.
func engineWorker(t *testing.T) (*Monitor, *testingclock.FakeClock, *fakeWorker) {
	fw := startFakeWorker(t)
	m, clock := newTestMonitor(t, wedgeConfig(), Target{ID: 1, URL: fw.url})
	return m, clock, fw
}

// second advances the clock by a second, evaluates and runs the tasks due.
func second(m *Monitor, clock *testingclock.FakeClock) {
	clock.Step(time.Second)
	m.judge.stalls.beat(m.now())
	m.Tick()
	tasksRound(m)
}

func TestEngineProgressKeepsALongGenerationAlive(t *testing.T) {
	m, clock, fw := engineWorker(t)
	a := begin(t, m, 1) // a non-streamed generation: nothing arrives before the end
	defer a.End(OutcomeSuccess)
	fw.running.Store(1)
	for range 300 {
		fw.tokens.Add(40) // the engine generates
		second(m, clock)
	}
	if st := status(t, m, 1); st.Wedged || isClosed(a.Stuck()) || st.EngineRunning != 1 {
		t.Fatalf("5 minutes of a generation whose engine's token counter rose: %+v, stuck %v; "+
			"want not wedged and the engine's running count read", st, isClosed(a.Stuck()))
	}
	fw.genCode.Store(fasthttp.StatusServiceUnavailable) // nor does it answer a recovery probe
	for s := 1; !status(t, m, 1).Wedged; s++ {
		if s > 70 {
			t.Fatal("not wedged 70s after the engine's counter stopped")
		}
		second(m, clock)
	}
	if !isClosed(a.Stuck()) {
		t.Fatal("attempt on a worker wedged in its engine not given up")
	}
}

func TestEngineIsReadOnlyWhileItsRequestsAreSilent(t *testing.T) {
	m, clock, fw := engineWorker(t)
	for range 100 {
		second(m, clock) // idle
	}
	a := begin(t, m, 1)
	for range 100 {
		a.Progress(1) // streaming
		second(m, clock)
	}
	a.End(OutcomeSuccess)
	if got := fw.scrapes.Load(); got != 0 {
		t.Fatalf("engine scraped %d times while idle or streaming", got)
	}
	b := begin(t, m, 1)
	defer b.End(OutcomeCanceled)
	for range 60 {
		second(m, clock)
	}
	// From 20s of silence (a third of the wedge timeout), every 10s.
	if got := fw.scrapes.Load(); got < 4 || got > 5 {
		t.Fatalf("engine scraped %d times in 60s of silence, want 4 or 5", got)
	}
}
