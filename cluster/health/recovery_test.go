package health

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"
)

// wedgedWorker returns a monitor whose one loopback worker has been judged
// wedged, with the attempt that went silent on it.
func wedgedWorker(t *testing.T, cfg Config) (*Monitor, *testingclock.FakeClock, *fakeWorker, *Attempt) {
	t.Helper()
	fw := startFakeWorker(t)
	m, clock := newTestMonitor(t, cfg, Target{ID: 1, URL: fw.url, Model: "m"})
	a := begin(t, m, 1)
	t.Cleanup(func() { a.End(OutcomeCanceled) })
	clock.Step(cfg.WedgeTimeout)
	m.Tick()
	if st := status(t, m, 1); !st.Wedged || st.Circuit != CircuitOpen {
		t.Fatalf("after WedgeTimeout of silence: %+v, want wedged and open", st)
	}
	return m, clock, fw, a
}

func recoveryConfig() Config {
	cfg := wedgeConfig()
	cfg.CBTimeout = time.Hour // only a recovery probe can bring the worker back
	cfg.APIKey = "sk-router"
	return cfg
}

func TestWedgedWorkerIsBackTheMomentItsProbeAnswers(t *testing.T) {
	m, _, fw, stuck := wedgedWorker(t, recoveryConfig())
	release := fw.wedge()
	round := make(chan struct{})
	go func() { defer close(round); tasksRound(m) }()
	<-fw.genHeld // the probe waits in the wedged engine's queue
	if m.Eligible(1) || !status(t, m, 1).Wedged {
		t.Fatal("eligible while its recovery probe hangs")
	}
	stuck.End(OutcomeCanceled) // the proxy failed the stuck request over
	release()                  // the engine moves again
	<-round
	st := status(t, m, 1)
	if st.Wedged || st.Circuit != CircuitClosed || !m.Eligible(1) || len(m.Verdicts()) != 0 {
		t.Fatalf("after the recovery probe answered: %+v verdicts %v; want closed and eligible at once", st, m.Verdicts())
	}
}

func TestRecoveryProbeIsAOneTokenCompletion(t *testing.T) {
	m, _, fw, _ := wedgedWorker(t, recoveryConfig())
	tasksRound(m)
	seen := <-fw.genSeen
	auth, body, _ := strings.Cut(seen, "\n")
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Prompt    string `json:"prompt"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("recovery probe body %q: %v", body, err)
	}
	if req.Model != "m" || req.MaxTokens != 1 || req.Stream || req.Prompt == "" {
		t.Fatalf("recovery probe %+v, want a non-streamed one-token completion for model m", req)
	}
	if auth != "Bearer sk-router" {
		t.Fatalf("recovery probe Authorization %q, want the router's API key", auth)
	}
}

func TestFailedRecoveryProbesBackOff(t *testing.T) {
	m, clock, fw, _ := wedgedWorker(t, recoveryConfig())
	fw.genCode.Store(fasthttp.StatusServiceUnavailable)
	tasksRound(m) // at once on the verdict
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		sent := fw.generated.Load()
		clock.Step(wait - time.Millisecond)
		m.Tick()
		tasksRound(m)
		if fw.generated.Load() != sent {
			t.Fatalf("probe sent %v after a failure, before the %v backoff", wait-time.Millisecond, wait)
		}
		clock.Step(time.Millisecond)
		m.Tick()
		tasksRound(m)
		if fw.generated.Load() != sent+1 {
			t.Fatalf("no probe once the %v backoff was over", wait)
		}
	}
	if st := status(t, m, 1); !st.Wedged || m.Eligible(1) {
		t.Fatalf("a worker answering 503 to its probes: %+v, want still wedged", st)
	}
}

func TestWorkerRefusingProbesRecoversAfterCBTimeout(t *testing.T) {
	cfg := recoveryConfig()
	cfg.CBTimeout = 30 * time.Second
	m, clock, fw, stuck := wedgedWorker(t, cfg)
	fw.genCode.Store(fasthttp.StatusNotFound) // no /v1/completions here
	tasksRound(m)
	stuck.End(OutcomeCanceled)
	m.Tick()
	if st := status(t, m, 1); st.Wedged || st.Circuit != CircuitOpen {
		t.Fatalf("a worker refusing probes, with nothing in flight: %+v, want the verdict lifted and the circuit open", st)
	}
	clock.Step(cfg.CBTimeout)
	m.Tick()
	tasksRound(m)
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen || fw.generated.Load() != 1 {
		t.Fatalf("CBTimeout later: circuit %v after %d probes, want half_open and no probe after the refusal", got, fw.generated.Load())
	}
}

func TestProgressHalfOpensAndTheProbeCloses(t *testing.T) {
	m, clock, fw, stuck := wedgedWorker(t, recoveryConfig())
	fw.genCode.Store(fasthttp.StatusServiceUnavailable)
	tasksRound(m)
	fw.genCode.Store(fasthttp.StatusOK)
	clock.Step(100 * time.Millisecond)
	stuck.Progress(1) // the stuck request moves: progress is back
	m.Tick()
	if got := status(t, m, 1).Circuit; got != CircuitHalfOpen {
		t.Fatalf("circuit after progress came back = %v, want half_open", got)
	}
	tasksRound(m) // the probe is due at once, whatever the backoff was
	if got := status(t, m, 1).Circuit; got != CircuitClosed || fw.generated.Load() != 2 {
		t.Fatalf("after the half-open probe answered: circuit %v after %d probes, want closed", got, fw.generated.Load())
	}
}

// TestARecoveryProbeThatTimesOutIsFollowedAtOnce: against a wedge, each
// recovery probe waits its whole bound in the engine's queue. The next one
// goes at once rather than after a growing backoff, so one is always
// waiting when the engine moves again: a wedge that clears while the
// backoff ran left the worker out for up to 30 s.
func TestARecoveryProbeThatTimesOutIsFollowedAtOnce(t *testing.T) {
	cfg := recoveryConfig()
	cfg.WedgeTimeout = 200 * time.Millisecond // the probe's bound, in real time
	m, _, fw, stuck := wedgedWorker(t, cfg)
	release := fw.wedge()
	for round := 1; round <= 3; round++ {
		tasksRound(m) // the probe times out against the wedge
		m.Tick()      // no time passes on the monitor's clock
		if got := fw.generated.Load(); got != int32(round) {
			t.Fatalf("round %d: %d probes sent, want one per round: a timed-out probe is followed at once", round, got)
		}
	}
	stuck.End(OutcomeCanceled)
	round := make(chan struct{})
	go func() { defer close(round); tasksRound(m) }()
	<-fw.genHeld
	release()
	<-round
	if st := status(t, m, 1); st.Wedged || st.Circuit != CircuitClosed || !m.Eligible(1) {
		t.Fatalf("after the waiting probe answered: %+v, want closed and eligible at once", st)
	}
}
