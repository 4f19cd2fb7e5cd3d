package health

import (
	"testing"
	"time"
)

func wedgeConfig() Config {
	cfg := testConfig()
	cfg.WedgeTimeout = 60 * time.Second
	cfg.CBTimeout = 30 * time.Second
	cfg.CBSuccessThreshold = 2
	return cfg
}

func TestWedgeDetectedAfterTimeoutWithSilentInflight(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(2)...)
	changes := changeCounter(m)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	clock.Advance(59 * time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || !m.Eligible(1) {
		t.Fatalf("wedged after 59s of a 60s timeout: %+v", st)
	}
	clock.Advance(time.Second)
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

func TestWedgeClearsWhenProgressReturnsAndTrialsCloseCircuit(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	stuck := begin(t, m, 1)
	clock.Advance(time.Minute)
	m.Tick()
	if !status(t, m, 1).Wedged {
		t.Fatal("not wedged after WedgeTimeout")
	}
	stuck.Progress(1)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || len(m.Verdicts()) != 0 {
		t.Fatalf("wedge verdict survived returning progress: %+v verdicts %v", st, m.Verdicts())
	}
	stuck.End(OutcomeSuccess)
	clock.Advance(30 * time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Circuit != CircuitHalfOpen || !m.Eligible(1) {
		t.Fatalf("CBTimeout after the wedge: %+v, want half_open and eligible", st)
	}
	for range 2 {
		a := begin(t, m, 1)
		clock.Advance(time.Second)
		a.Progress(1)
		a.End(OutcomeSuccess)
	}
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("circuit after progressing trials = %v, want closed", got)
	}
}

func TestWedgeHoldsCircuitOpenPastCBTimeout(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	clock.Advance(time.Minute)
	m.Tick()
	clock.Advance(5 * time.Minute)
	m.Tick()
	if st := status(t, m, 1); !st.Wedged || st.Circuit != CircuitOpen {
		t.Fatalf("still silent long after CBTimeout: %+v, want wedged and open", st)
	}
}

func TestNoWedgeWithoutInflight(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	clock.Advance(time.Hour)
	m.Tick()
	finish(t, m, 1, 3, OutcomeSuccess)
	clock.Advance(time.Hour)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || !m.Eligible(1) {
		t.Fatalf("idle worker judged wedged: %+v", st)
	}
}

func TestIdleGapDoesNotCountAsSilence(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	finish(t, m, 1, 1, OutcomeSuccess)
	clock.Advance(time.Hour)
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	clock.Advance(time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Wedged {
		t.Fatalf("request 1s old on a worker idle for an hour judged wedged: %+v", st)
	}
}

func TestStreamChunksKeepWorkerAlive(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	for range 10 {
		clock.Advance(50 * time.Second)
		a.Progress(3)
		m.Tick()
	}
	if st := status(t, m, 1); st.Wedged {
		t.Fatalf("worker streaming a chunk every 50s judged wedged: %+v", st)
	}
}

func TestFailuresWithoutProgressStillWedge(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(1)...)
	stuck := begin(t, m, 1)
	defer stuck.End(OutcomeCanceled)
	for range 6 {
		clock.Advance(10 * time.Second)
		finish(t, m, 1, 1, OutcomeCanceled)
	}
	m.Tick()
	if !status(t, m, 1).Wedged {
		t.Fatal("cancelled requests passed for progress while another hung")
	}
}
