package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// running starts m.Run until the test ends.
func running(t *testing.T, m *Monitor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// liveConfig is for monitors on the system clock: an active-check interval
// of an hour, so that anything that happens sooner is not the periodic round.
func liveConfig() Config {
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	cfg.Timeout = 2 * time.Second
	cfg.EvalInterval = 20 * time.Millisecond
	return cfg
}

func TestWorkersAreProbedAsSoonAsTheyAreAdded(t *testing.T) {
	a, b := startFakeWorker(t), startFakeWorker(t)
	m, err := New(liveConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	running(t, m)
	// Run's opening round, on no workers, comes first: added during it, the
	// first worker would be probed by that round as well as on being added,
	// perhaps only after the count below was read.
	testwait.Eventually(t, waitDeadline, func() bool { return m.judge.isolation.round.Load() > 0 }, "Run's opening round")
	if err := m.SetWorkers([]Target{{ID: 1, URL: a.url}}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return m.Eligible(1) }, "the first worker to be probed and eligible")
	probed := a.probes.Load()
	if err := m.SetWorkers([]Target{{ID: 1, URL: a.url}, {ID: 2, URL: b.url}}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return m.Eligible(2) }, "the added worker to be probed and eligible")
	if a.probes.Load() != probed {
		t.Fatal("adding a worker probed the others again")
	}
}

func TestWorkerThatStartsLaterIsTakenInSoonAfter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there yet
	m, err := New(liveConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	running(t, m)
	if err := m.SetWorkers([]Target{{ID: 1, URL: "http://" + addr}}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { st, _ := m.Status(1); return st.Probed }, "the first probe to fail")
	if m.Eligible(1) {
		t.Fatal("a worker that refused its first probe is eligible")
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {}, MaxIdleWorkerDuration: 10 * time.Millisecond}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-served })
	testwait.Eventually(t, waitDeadline, func() bool { return m.Eligible(1) }, "the worker to be taken in once it listens, long before the hourly round")
}

// TestWedgedWorkerFailsOverAndComesBackEndToEnd runs a real request to a
// real loopback worker that wedges, as the proxy will: it gives up on the
// attempt when Stuck fires, and retries on the other worker. The wedged
// worker is back as soon as it moves again, long before CBTimeout.
func TestWedgedWorkerFailsOverAndComesBackEndToEnd(t *testing.T) {
	sick, well := startFakeWorker(t), startFakeWorker(t)
	cfg := liveConfig()
	cfg.WedgeTimeout = 300 * time.Millisecond
	cfg.CBTimeout = time.Hour
	m, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	running(t, m)
	if err := m.SetWorkers([]Target{{ID: 1, URL: sick.url}, {ID: 2, URL: well.url}}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return m.Eligible(1) && m.Eligible(2) }, "both workers eligible")
	release := sick.wedge()
	defer release()
	answeredBy, err := completeWithFailover(m, map[WorkerID]string{1: sick.url, 2: well.url}, 1)
	if err != nil || answeredBy != 2 {
		t.Fatalf("a request that began on the wedged worker: answered by %d, %v; want the other worker", answeredBy, err)
	}
	// The attempt gave up on its own silence; the verdict comes at the next evaluation.
	testwait.Eventually(t, waitDeadline, func() bool { return !m.Eligible(1) }, "the wedged worker taken out")
	testwait.Eventually(t, waitDeadline, func() bool { return sick.generated.Load() >= 2 }, "a recovery probe waiting in the wedged engine")
	released := time.Now()
	release()
	testwait.Eventually(t, waitDeadline, func() bool { return m.Eligible(1) }, "the worker to come back, long before CBTimeout")
	t.Logf("back %v after it moved again (CBTimeout %v)", time.Since(released).Round(time.Millisecond), cfg.CBTimeout)
}

// completeWithFailover sends one completion to worker first, as the proxy
// does: it reports progress, gives up when Stuck fires (cancelling the
// upstream request) and tries the next eligible worker. It returns the worker
// that answered.
func completeWithFailover(m *Monitor, urls map[WorkerID]string, first WorkerID) (WorkerID, error) {
	next := first
	for range len(urls) {
		a, err := m.Begin(next)
		if err != nil {
			return 0, err
		}
		if err := completeOnce(a, urls[next]); !errors.Is(err, errGaveUp) {
			return next, err
		}
		for id := range urls {
			if id != next && m.Eligible(id) {
				next = id
				break
			}
		}
	}
	return 0, errors.New("every worker was stuck")
}

var errGaveUp = errors.New("attempt given up")

func completeOnce(a *Attempt, url string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"prompt":"hello","max_tokens":8}`))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			a.Progress(0)
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		a.End(OutcomeOfStatus(200))
		return err
	case <-a.Stuck():
		cancel()
		<-done
		a.End(OutcomeCanceled)
		return errGaveUp
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		a.End(OutcomeCanceled)
		return errors.New("neither answered nor given up on within 10s")
	}
}

func TestAwaitProbedReturnsOnceEveryWorkerAnswered(t *testing.T) {
	up, down := startFakeWorker(t), startFakeWorker(t)
	down.code.Store(fasthttp.StatusServiceUnavailable)
	m, err := New(liveConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- m.AwaitProbed(ctx, 1, 2) }() // before the workers are even watched
	running(t, m)
	if err := m.SetWorkers([]Target{{ID: 1, URL: up.url}, {ID: 2, URL: down.url}}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("AwaitProbed: %v", err)
	}
	if !m.Eligible(1) || m.Eligible(2) {
		t.Fatalf("after AwaitProbed: eligible %v %v, want the answering worker only", m.Eligible(1), m.Eligible(2))
	}
	short, stop := context.WithCancel(context.Background())
	stop()
	if err := m.AwaitProbed(short, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitProbed for a worker never watched: %v, want the context's error", err)
	}
}
