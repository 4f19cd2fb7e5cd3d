package health

import (
	"errors"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

func TestNewWorkersWaitForTheirFirstProbe(t *testing.T) {
	m, err := New(testConfig(), testingclock.NewFakeClock(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	changes := changeCounter(m)
	if err := m.SetWorkers(targets(t, 3)); err != nil {
		t.Fatal(err)
	}
	for _, st := range m.Statuses() {
		if st.Eligible || st.Healthy || st.Probed || m.Eligible(st.ID) {
			t.Errorf("new worker %d before any probe: %+v, want neither probed, healthy nor eligible", st.ID, st)
		}
	}
	checkRound(t, m)
	for _, st := range m.Statuses() {
		if !st.Eligible || !st.Healthy || !st.Probed || st.Circuit != CircuitClosed {
			t.Errorf("new worker %d after one good probe: %+v, want healthy, closed, eligible", st.ID, st)
		}
	}
	if changes.Load() == 0 {
		t.Error("workers becoming eligible were not announced through OnChange")
	}
}

func TestFirstFailedProbeKeepsWorkerOutUntilItAnswers(t *testing.T) {
	fw := startFakeWorker(t)
	fw.code.Store(fasthttp.StatusServiceUnavailable)
	cfg := testConfig()
	cfg.SuccessThreshold = 5
	m, clock := newTestMonitor(t, cfg, Target{ID: 1, URL: fw.url})
	if st := status(t, m, 1); st.Eligible || st.Healthy || !st.Probed {
		t.Fatalf("worker answering 503 to its first probe: %+v, want probed and not eligible", st)
	}
	tasksRound(m)
	if got := fw.probes.Load(); got != 1 {
		t.Fatalf("probed again at once after a failure: %d probes", got)
	}
	fw.code.Store(fasthttp.StatusOK)
	clock.Step(contactBase)
	tasksRound(m)
	if st := status(t, m, 1); !st.Eligible || fw.probes.Load() != 2 {
		t.Fatalf("one second later, a worker that never was healthy answered 200: %+v after %d probes; "+
			"want eligible on its first good answer, whatever --health-success-threshold says", st, fw.probes.Load())
	}
}

func TestSetWorkersKeepsStateOfUnchangedWorkers(t *testing.T) {
	cfg := breakerConfig()
	m, _ := newTestMonitor(t, cfg, targets(t, 2)...)
	openCircuit(t, m, 1)
	openCircuit(t, m, 2)
	next := targets(t, 3)
	next[1].URL = "http://127.0.0.1:10"
	if err := m.SetWorkers(next); err != nil {
		t.Fatal(err)
	}
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Errorf("unchanged worker 1 lost its state: circuit %v", got)
	}
	if st := status(t, m, 2); st.Circuit != CircuitClosed || st.URL != "http://127.0.0.1:10" {
		t.Errorf("worker 2 with a new URL kept stale state: %+v", st)
	}
	if m.Eligible(3) {
		t.Error("added worker 3 eligible before its first probe")
	}
	checkRound(t, m)
	if !m.Eligible(3) {
		t.Error("added worker 3 not eligible after its first probe")
	}
}

func TestSetWorkersDropsRemovedWorkers(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 2)...)
	a := begin(t, m, 2)
	if err := m.SetWorkers(targets(t, 1)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Status(2); ok || m.Eligible(2) {
		t.Fatal("removed worker still watched")
	}
	if _, err := m.Begin(2); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("Begin on removed worker: err = %v, want ErrUnknownWorker", err)
	}
	a.Progress(3)
	a.End(OutcomeFailure) // must not panic or touch the remaining workers
	if len(m.Statuses()) != 1 {
		t.Fatalf("Statuses() = %v, want only worker 1", m.Statuses())
	}
}

func TestSetWorkersRejectsUnprobeableURLs(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig())
	err := m.SetWorkers([]Target{
		{ID: 1, URL: healthyWorker(t).url},
		{ID: 2, URL: "127.0.0.1:8001"},
		{ID: 3, URL: "ftp://127.0.0.1"},
	})
	if !errors.Is(err, ErrBadTarget) {
		t.Fatalf("SetWorkers with bad URLs: err = %v, want ErrBadTarget", err)
	}
	checkRound(t, m)
	if !m.Eligible(1) || m.Eligible(2) || m.Eligible(3) {
		t.Fatal("good target not applied, or bad ones applied")
	}
}

func TestProbeURLJoinsBaseAndEndpoint(t *testing.T) {
	for raw, want := range map[string]string{
		"http://h:1":          "http://h:1/health",
		"http://h:1/":         "http://h:1/health",
		"https://h/v1/":       "https://h/v1/health",
		"http://127.0.0.1:80": "http://127.0.0.1:80/health",
	} {
		pt, err := newProbeTarget(raw, "/health")
		if err != nil || pt.uri != want {
			t.Errorf("newProbeTarget(%q) = %q, %v; want %q", raw, pt.uri, err, want)
		}
	}
	if pt, _ := newProbeTarget("https://h", "/health"); pt.addr != "h:443" || !pt.isTLS {
		t.Errorf("https target dials %q tls %v, want h:443 over TLS", pt.addr, pt.isTLS)
	}
}

func TestNilAttemptIsInert(t *testing.T) {
	var a *Attempt
	a.Progress(3)
	a.End(OutcomeFailure)
	if a.Trial() || a.Worker() != 0 {
		t.Fatal("nil attempt reports state")
	}
	if a.Stuck() != nil {
		t.Fatal("nil attempt's Stuck is not the nil channel, which never fires")
	}
}

func TestConcurrentAttemptsBalanceInflight(t *testing.T) {
	m, _ := newTestMonitor(t, testConfig(), targets(t, 4)...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				a, err := m.Begin(WorkerID(1 + (g+i)%4))
				if err != nil {
					continue
				}
				a.Progress(1)
				a.End(Outcome(i % 3))
				a.End(OutcomeSuccess)
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			m.Tick()
			m.Eligible(1)
		}
	})
	wg.Wait()
	for _, st := range m.Statuses() {
		if st.InFlight != 0 {
			t.Errorf("worker %d in flight = %d after every attempt ended", st.ID, st.InFlight)
		}
	}
}
