package health

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

func targetOf(id WorkerID, fw *fakeWorker) Target { return Target{ID: id, URL: fw.url} }

func TestProbeFailuresMarkUnhealthyAtThreshold(t *testing.T) {
	fw := startFakeWorker(t)
	m, _ := newTestMonitor(t, testConfig(), targetOf(1, fw))
	changes := changeCounter(m)
	fw.code.Store(fasthttp.StatusServiceUnavailable)
	checkRound(t, m)
	checkRound(t, m)
	if !status(t, m, 1).Healthy || !m.Eligible(1) {
		t.Fatal("unhealthy after 2 of 3 failed probes")
	}
	checkRound(t, m)
	if st := status(t, m, 1); st.Healthy || m.Eligible(1) {
		t.Fatalf("after 3 failed probes: %+v, want unhealthy and ineligible", st)
	}
	if changes.Load() != 1 {
		t.Fatalf("OnChange calls = %d, want 1", changes.Load())
	}
	if got := fw.probes.Load(); got != 4 {
		t.Fatalf("worker saw %d probes in 3 rounds after the first", got)
	}
}

func TestProbeSuccessesRecoverAtThreshold(t *testing.T) {
	fw := startFakeWorker(t)
	m, _ := newTestMonitor(t, testConfig(), targetOf(1, fw))
	fw.code.Store(fasthttp.StatusInternalServerError)
	for range 3 {
		checkRound(t, m)
	}
	fw.code.Store(fasthttp.StatusOK)
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("healthy after 1 of 2 good probes")
	}
	fw.code.Store(fasthttp.StatusInternalServerError)
	checkRound(t, m)
	fw.code.Store(fasthttp.StatusOK)
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("non-consecutive good probes recovered the worker")
	}
	checkRound(t, m)
	if !status(t, m, 1).Healthy || !m.Eligible(1) {
		t.Fatal("not healthy after 2 consecutive good probes")
	}
}

func TestConnectRefusedIsAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig()
	cfg.FailureThreshold = 1
	m, _ := newTestMonitor(t, cfg, Target{ID: 1, URL: "http://" + addr})
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("worker refusing connections still healthy")
	}
}

func TestProbeTimeoutIsAFailure(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.Timeout = 100 * time.Millisecond
	cfg.FailureThreshold = 1
	m, _ := newTestMonitor(t, cfg, targetOf(1, fw))
	release := fw.hold()
	defer release()
	start := time.Now()
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("worker whose health endpoint hangs still healthy")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("round with a hanging worker took %v, want about Timeout", took)
	}
}

func TestProbeUsesConfiguredEndpoint(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	cfg.Endpoint = "/healthz"
	m, _ := newTestMonitor(t, cfg, targetOf(1, fw))
	checkRound(t, m)
	if status(t, m, 1).Healthy {
		t.Fatal("a 404 on the configured endpoint passed as healthy")
	}
	if fw.probes.Load() != 0 {
		t.Fatal("probe went to /health instead of the configured endpoint")
	}
}

func TestSlowWorkerDoesNotDelayOthers(t *testing.T) {
	slowW, sick, well := startFakeWorker(t), startFakeWorker(t), startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	m, _ := newTestMonitor(t, cfg, targetOf(1, slowW), targetOf(2, sick), targetOf(3, well))
	sick.code.Store(fasthttp.StatusServiceUnavailable)
	release := slowW.hold()
	round := make(chan error, 1)
	go func() { round <- m.CheckNow(context.Background()) }()
	<-slowW.waiting
	testwait.Eventually(t, waitDeadline, func() bool { return !status(t, m, 2).Healthy }, "the sick worker's verdict")
	testwait.Eventually(t, waitDeadline, func() bool { return well.probes.Load() == 2 }, "the well worker's probe")
	select {
	case <-round:
		t.Fatal("round finished while a probe was still hanging")
	default:
	}
	release()
	if err := <-round; err != nil {
		t.Fatalf("CheckNow: %v", err)
	}
	if !status(t, m, 1).Healthy {
		t.Fatal("slow but good probe counted as a failure")
	}
}

func TestCanceledRoundCountsNothing(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	m, _ := newTestMonitor(t, cfg, targetOf(1, fw))
	release := fw.hold()
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	round := make(chan error, 1)
	go func() { round <- m.CheckNow(ctx) }()
	<-fw.waiting
	start := time.Now()
	cancel()
	if err := <-round; !errors.Is(err, context.Canceled) {
		t.Fatalf("CheckNow after cancel: err = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("cancelled round took %v to return; its probe was not aborted", took)
	}
	if !status(t, m, 1).Healthy {
		t.Fatal("a probe cut short by cancellation counted as a failure")
	}
}

func TestChecksLeaveRequestAccountingAlone(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	cfg.CBFailureThreshold = 2
	m, _ := newTestMonitor(t, cfg, targetOf(1, fw))
	inflight := begin(t, m, 1)
	defer inflight.End(OutcomeSuccess)
	finish(t, m, 1, 1, OutcomeFailure)
	fw.code.Store(fasthttp.StatusInternalServerError)
	checkRound(t, m)
	fw.code.Store(fasthttp.StatusOK)
	for range 3 {
		checkRound(t, m)
	}
	st := status(t, m, 1)
	if st.InFlight != 1 || st.Circuit != CircuitClosed {
		t.Fatalf("probes changed request accounting: %+v", st)
	}
	finish(t, m, 1, 1, OutcomeFailure)
	if got := status(t, m, 1).Circuit; got != CircuitOpen {
		t.Fatalf("good probes reset the request failure streak: circuit %v, want open", got)
	}
}

// TestRunChecksPeriodicallyAndStops: that nothing outlives Run is goleak's job.
func TestRunChecksPeriodicallyAndStops(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := testConfig()
	cfg.Interval = 20 * time.Millisecond
	cfg.Timeout = 20 * time.Millisecond
	cfg.EvalInterval = 5 * time.Millisecond
	cfg.FailureThreshold = 2
	m, _ := newTestMonitor(t, cfg, targetOf(1, fw))
	var changed atomic.Int32
	m.OnChange(func() { changed.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	testwait.Eventually(t, waitDeadline, func() bool { return fw.probes.Load() >= 3 }, "three probes")
	if err := m.Run(ctx); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: err = %v, want ErrAlreadyRunning", err)
	}
	fw.code.Store(fasthttp.StatusBadGateway)
	testwait.Eventually(t, waitDeadline, func() bool { return !m.Eligible(1) }, "the worker to be marked unhealthy")
	testwait.Eventually(t, waitDeadline, func() bool { return changed.Load() >= 1 }, "OnChange")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunDeliversChangeWhileSlowProbePending(t *testing.T) {
	slowW, sick := startFakeWorker(t), startFakeWorker(t)
	cfg := testConfig()
	cfg.FailureThreshold = 1
	m, _ := newTestMonitor(t, cfg, targetOf(1, slowW), targetOf(2, sick))
	changed := make(chan struct{}, 1)
	m.OnChange(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	sick.code.Store(fasthttp.StatusServiceUnavailable)
	release := slowW.hold()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-slowW.waiting
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no OnChange for the sick worker while another probe hung")
	}
	release()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
