package health

import (
	"errors"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
)

// breakerConfig trips after 3 failures, closes after 2 trial successes, and
// admits 2 trials at once.
func breakerConfig() Config {
	cfg := testConfig()
	cfg.CBFailureThreshold = 3
	cfg.CBSuccessThreshold = 2
	cfg.CBHalfOpenTrials = 2
	return cfg
}

// openCircuit trips worker id's breaker.
func openCircuit(t *testing.T, m *Monitor, id WorkerID) {
	t.Helper()
	finish(t, m, id, m.cfg.CBFailureThreshold, OutcomeFailure)
	if got := status(t, m, id).Circuit; got != CircuitOpen {
		t.Fatalf("circuit after %d failures = %v, want open", m.cfg.CBFailureThreshold, got)
	}
}

// halfOpen trips worker id's breaker and waits out CBTimeout.
func halfOpen(t *testing.T, m *Monitor, clock *testingclock.FakeClock, id WorkerID) {
	t.Helper()
	openCircuit(t, m, id)
	clock.Step(m.cfg.CBTimeout)
	m.Tick()
	if got := status(t, m, id).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit after CBTimeout = %v, want half_open", got)
	}
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	m, _ := newTestMonitor(t, breakerConfig(), targets(t, 2)...)
	finish(t, m, 1, 2, OutcomeFailure)
	if st := status(t, m, 1); st.Circuit != CircuitClosed || !m.Eligible(1) {
		t.Fatalf("after 2 of 3 failures: circuit %v eligible %v, want closed and eligible", st.Circuit, m.Eligible(1))
	}
	finish(t, m, 1, 1, OutcomeFailure)
	if st := status(t, m, 1); st.Circuit != CircuitOpen || m.Eligible(1) {
		t.Fatalf("after 3 failures: circuit %v eligible %v, want open and not eligible", st.Circuit, m.Eligible(1))
	}
	if _, err := m.Begin(1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Begin on open circuit: err = %v, want ErrCircuitOpen", err)
	}
	if !m.Eligible(2) {
		t.Fatal("a peer's circuit opening made worker 2 ineligible")
	}
}

func TestBreakerSuccessResetsFailureStreak(t *testing.T) {
	m, _ := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	for range 5 {
		finish(t, m, 1, 2, OutcomeFailure)
		finish(t, m, 1, 1, OutcomeSuccess)
	}
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("interleaved failures opened the circuit: %v", got)
	}
}

func TestClientErrorsCountAsSuccess(t *testing.T) {
	for _, code := range []int{200, 204, 301, 400, 404, 408, 429} {
		if got := OutcomeOfStatus(code); got != OutcomeSuccess {
			t.Errorf("OutcomeOfStatus(%d) = %v, want success", code, got)
		}
	}
	for _, code := range []int{500, 502, 503, 504} {
		if got := OutcomeOfStatus(code); got != OutcomeFailure {
			t.Errorf("OutcomeOfStatus(%d) = %v, want failure", code, got)
		}
	}
	m, _ := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	for range 4 {
		finish(t, m, 1, 2, OutcomeFailure)
		finish(t, m, 1, 1, OutcomeOfStatus(429))
	}
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("4xx answers did not break the failure streak: circuit %v", got)
	}
}

func TestCanceledAttemptsDoNotCount(t *testing.T) {
	m, clock := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	finish(t, m, 1, 2, OutcomeFailure)
	finish(t, m, 1, 10, OutcomeCanceled)
	finish(t, m, 1, 1, OutcomeFailure)
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("cancellations broke the failure streak: circuit %v, want open", got)
	}
	clock.Step(m.cfg.CBTimeout)
	m.Tick()
	finish(t, m, 1, 5, OutcomeCanceled)
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen {
		t.Fatalf("canceled trials moved the half-open circuit: %v", got)
	}
}

func TestBreakerHalfOpensAfterTimeout(t *testing.T) {
	m, clock := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	changes := changeCounter(m)
	openCircuit(t, m, 1)
	m.Tick()
	if changes.Load() != 1 {
		t.Fatalf("OnChange calls after opening = %d, want 1", changes.Load())
	}
	clock.Step(m.cfg.CBTimeout - 1)
	m.Tick()
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("circuit 1ns before CBTimeout = %v, want open", got)
	}
	clock.Step(1)
	m.Tick()
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen || !m.Eligible(1) {
		t.Fatalf("circuit at CBTimeout = %v eligible %v, want half_open and eligible", got, m.Eligible(1))
	}
	if changes.Load() != 2 {
		t.Fatalf("OnChange calls after half-opening = %d, want 2", changes.Load())
	}
}

func TestHalfOpenAdmitsLimitedTrials(t *testing.T) {
	m, clock := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	halfOpen(t, m, clock, 1)
	first, second := begin(t, m, 1), begin(t, m, 1)
	if !first.Trial() || !second.Trial() {
		t.Fatal("attempts admitted by a half-open circuit are not trials")
	}
	if m.Eligible(1) {
		t.Fatal("worker eligible with every trial slot taken")
	}
	if _, err := m.Begin(1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("third concurrent trial: err = %v, want ErrCircuitOpen", err)
	}
	first.End(OutcomeCanceled)
	if !m.Eligible(1) {
		t.Fatal("an ended trial did not free its slot")
	}
	begin(t, m, 1).End(OutcomeCanceled)
	second.End(OutcomeCanceled)
}

func TestHalfOpenClosesAfterSuccesses(t *testing.T) {
	m, clock := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	halfOpen(t, m, clock, 1)
	finish(t, m, 1, 1, OutcomeSuccess)
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit after 1 of 2 trial successes = %v, want half_open", got)
	}
	finish(t, m, 1, 1, OutcomeSuccess)
	if got := status(t, m, 1).Circuit; got != CircuitClosed {
		t.Fatalf("circuit after 2 trial successes = %v, want closed", got)
	}
	if a := begin(t, m, 1); a.Trial() {
		t.Fatal("attempt in a closed circuit marked as trial")
	}
}

func TestHalfOpenFailureReopens(t *testing.T) {
	m, clock := newTestMonitor(t, breakerConfig(), targets(t, 1)...)
	halfOpen(t, m, clock, 1)
	finish(t, m, 1, 1, OutcomeSuccess)
	finish(t, m, 1, 1, OutcomeFailure)
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("circuit after a trial failure = %v, want open", got)
	}
	clock.Step(m.cfg.CBTimeout - 1)
	m.Tick()
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("reopened circuit half-opened before a full CBTimeout: %v", got)
	}
}

func TestStaleAttemptCannotCloseCircuit(t *testing.T) {
	cfg := breakerConfig()
	cfg.WedgeTimeout = 10 * cfg.CBTimeout // the early attempts stay silent meanwhile
	m, clock := newTestMonitor(t, cfg, targets(t, 1)...)
	early := []*Attempt{begin(t, m, 1), begin(t, m, 1)}
	halfOpen(t, m, clock, 1)
	for _, a := range early {
		a.End(OutcomeSuccess)
	}
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen {
		t.Fatalf("successes of attempts sent before the circuit opened moved it to %v", got)
	}
}

func TestEndTwiceCountsOnce(t *testing.T) {
	cfg := breakerConfig()
	cfg.CBFailureThreshold = 2
	m, clock := newTestMonitor(t, cfg, targets(t, 1)...)
	a := begin(t, m, 1)
	a.End(OutcomeFailure)
	a.End(OutcomeFailure)
	if st := status(t, m, 1); st.Circuit != CircuitClosed || st.InFlight != 0 {
		t.Fatalf("after one failed attempt ended twice: circuit %v in flight %d, want closed and 0",
			st.Circuit, st.InFlight)
	}
	finish(t, m, 1, 1, OutcomeFailure)
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("circuit after the second failed attempt = %v, want open", got)
	}
	clock.Step(cfg.CBTimeout)
	m.Tick()
	trial := begin(t, m, 1)
	trial.End(OutcomeCanceled)
	trial.End(OutcomeCanceled)
	begin(t, m, 1)
	begin(t, m, 1)
	if _, err := m.Begin(1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("a trial ended twice freed two slots: err = %v", err)
	}
}

func TestADisabledBreakerNeverOpensOnFailures(t *testing.T) {
	b := breaker{policy: breakerPolicy{failures: 2, successes: 1, trials: 1, timeout: 10, disabled: true}}
	for i := range 50 {
		if b.record(OutcomeFailure, b.gen, false, int64(i)) {
			t.Fatalf("failure %d moved the circuit", i)
		}
	}
	if b.state != CircuitClosed {
		t.Fatalf("state %v, want closed", b.state)
	}
}
