package health

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

// beats advances the clock by n heartbeats on time, evaluating after each.
func beats(m *Monitor, clock *testingclock.FakeClock, n int) {
	for range n {
		clock.Step(m.cfg.EvalInterval)
		m.judge.stalls.beat(m.now())
		m.Tick()
	}
}

// stall advances the clock by d with no heartbeat, as a stopped process
// would see it, then beats once: the late heartbeat that notices.
func stall(m *Monitor, clock *testingclock.FakeClock, d time.Duration) {
	clock.Step(d)
	m.judge.stalls.beat(m.now())
}

func TestStalledReplicaDoesNotJudgeWedgeOverItsStall(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	m.judge.stalls.beat(m.now())
	a := begin(t, m, 1)
	defer a.End(OutcomeCanceled)
	beats(m, clock, 50)
	stall(m, clock, 20*time.Second)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || isClosed(a.Stuck()) {
		t.Fatalf("70s after the request began, 20s of them stalled: %+v, stuck %v; "+
			"want not wedged: this replica saw only 50s of silence", st, isClosed(a.Stuck()))
	}
	if n, total := m.Stalls(); n != 1 || total < 20*time.Second {
		t.Fatalf("Stalls() = %d, %v; want one of at least 20s", n, total)
	}
	beats(m, clock, 9)
	if status(t, m, 1).Wedged {
		t.Fatal("wedged after 59s of observed silence")
	}
	beats(m, clock, 1)
	if !status(t, m, 1).Wedged || !isClosed(a.Stuck()) {
		t.Fatal("not wedged after 60s of observed silence")
	}
}

func TestLateHeartbeatsBelowASecondAreNoStall(t *testing.T) {
	m, clock := newTestMonitor(t, wedgeConfig(), targets(t, 1)...)
	m.judge.stalls.beat(m.now())
	a := begin(t, m, 1)
	defer a.End(OutcomeCanceled)
	for range 40 {
		stall(m, clock, m.cfg.EvalInterval+900*time.Millisecond)
		m.Tick()
	}
	if n, _ := m.Stalls(); n != 0 || !status(t, m, 1).Wedged {
		t.Fatalf("76s of heartbeats each 0.9s late: %d stalls, wedged %v; want none and wedged", n, status(t, m, 1).Wedged)
	}
}

func TestFailuresOfAStalledReplicaDoNotOpenCircuits(t *testing.T) {
	cfg := breakerConfig()
	m, clock := newTestMonitor(t, cfg, targets(t, 1)...)
	m.judge.stalls.beat(m.now())
	before := make([]*Attempt, cfg.CBFailureThreshold)
	for i := range before {
		before[i] = begin(t, m, 1)
	}
	clock.Step(8 * time.Second) // SIGSTOP: the heartbeat has not run yet
	for _, a := range before[:2] {
		a.End(OutcomeFailure) // timeouts that fired on waking, before the heartbeat did
	}
	m.judge.stalls.beat(m.now())
	before[2].End(OutcomeFailure) // after the heartbeat noticed
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("failures of attempts that spanned a stall of this replica opened the circuit: %v", got)
	}
	beats(m, clock, 3)
	finish(t, m, 1, cfg.CBFailureThreshold, OutcomeFailure)
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("failures after the stall: circuit %v, want open", got)
	}
}

func TestRateSamplesSpanningAStallAreDropped(t *testing.T) {
	m, clock := newTestMonitor(t, degradeConfig(), targets(t, 3)...)
	m.judge.stalls.beat(m.now())
	stream(t, m, clock, 1, 5, 50, time.Second)
	stream(t, m, clock, 2, 5, 50, time.Second)
	as := make([]*Attempt, 5)
	for i := range as {
		as[i] = begin(t, m, 3)
		as[i].Progress(1)
	}
	stall(m, clock, 10*time.Second) // the worker's tokens sat in our socket buffers
	for _, a := range as {
		a.Progress(10)
		a.End(OutcomeSuccess)
	}
	m.Tick()
	if status(t, m, 3).Degraded {
		t.Fatal("requests slowed by this replica's own stall judged the worker degraded")
	}
}

func TestProbeFailureDuringAStallIsNotCounted(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	m, clock := newTestMonitor(t, cfg, Target{ID: 1, URL: fw.url})
	m.judge.stalls.beat(m.now())
	fw.code.Store(fasthttp.StatusServiceUnavailable)
	release := fw.hold()
	round := make(chan error, 1)
	go func() { round <- m.CheckNow(context.Background()) }()
	<-fw.waiting
	clock.Step(10 * time.Second) // the replica stops while its probe is out
	release()
	if err := <-round; err != nil {
		t.Fatal(err)
	}
	if !status(t, m, 1).Healthy {
		t.Fatal("a probe that failed across a stall of this replica marked the worker unhealthy")
	}
	m.judge.stalls.beat(m.now())
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("a probe failing after the stall did not count")
	}
}
