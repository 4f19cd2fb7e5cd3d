package health

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests, except the
// fasthttp server's process-wide clock that refreshes the Date header: it is
// started once per process by the test servers and by design never stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig is DefaultConfig with probe timings fit for loopback tests.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	cfg.Timeout = 2 * time.Second
	return cfg
}

// newTestMonitor returns a Monitor on a FakeClock watching the given targets.
func newTestMonitor(t *testing.T, cfg Config, targets ...Target) (*Monitor, *FakeClock) {
	t.Helper()
	clock := NewFakeClock(t0)
	m, err := New(cfg, clock, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := m.SetWorkers(targets); err != nil {
		t.Fatalf("SetWorkers: %v", err)
	}
	m.Tick() // settle the membership change before tests count notifications
	return m, clock
}

// targets returns workers 1..n at unroutable-but-valid URLs, for tests that
// never probe.
func targets(n int) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{ID: WorkerID(i + 1), URL: "http://127.0.0.1:9"}
	}
	return out
}

func status(t *testing.T, m *Monitor, id WorkerID) WorkerStatus {
	t.Helper()
	st, ok := m.Status(id)
	if !ok {
		t.Fatalf("worker %d not watched", id)
	}
	return st
}

func begin(t *testing.T, m *Monitor, id WorkerID) *Attempt {
	t.Helper()
	a, err := m.Begin(id)
	if err != nil {
		t.Fatalf("Begin(%d): %v", id, err)
	}
	return a
}

// finish runs n sequential requests with the given outcome.
func finish(t *testing.T, m *Monitor, id WorkerID, n int, o Outcome) {
	t.Helper()
	for range n {
		begin(t, m, id).End(o)
	}
}

// changeCounter counts OnChange deliveries.
func changeCounter(m *Monitor) *atomic.Int32 {
	var n atomic.Int32
	m.OnChange(func() { n.Add(1) })
	return &n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fakeWorker is a loopback HTTP server whose health endpoint can be flipped
// healthy or unhealthy, or made to hang until released.
type fakeWorker struct {
	url     string
	code    atomic.Int32                  // status /health answers
	probes  atomic.Int32                  // requests seen on /health
	gate    atomic.Pointer[chan struct{}] // when set, /health waits for it to close
	waiting chan struct{}                 // receives when a probe starts waiting at the gate
	stop    chan struct{}
}

func startFakeWorker(t *testing.T) *fakeWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	fw := &fakeWorker{
		url:     "http://" + ln.Addr().String(),
		waiting: make(chan struct{}, 16),
		stop:    make(chan struct{}),
	}
	fw.code.Store(fasthttp.StatusOK)
	// A short idle-worker period lets the server's cleaner goroutine notice
	// Shutdown promptly instead of sleeping for the default 10s.
	srv := &fasthttp.Server{Handler: fw.handle, MaxIdleWorkerDuration: 10 * time.Millisecond}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		close(fw.stop)
		_ = srv.Shutdown()
		<-served
	})
	return fw
}

func (fw *fakeWorker) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) != "/health" {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		return
	}
	fw.probes.Add(1)
	if g := fw.gate.Load(); g != nil {
		fw.waiting <- struct{}{}
		select {
		case <-*g:
		case <-fw.stop:
		}
	}
	ctx.SetStatusCode(int(fw.code.Load()))
}

// hold makes /health hang until the returned release is called.
func (fw *fakeWorker) hold() (release func()) {
	g := make(chan struct{})
	fw.gate.Store(&g)
	return func() { fw.gate.Store(nil); close(g) }
}

func checkRound(t *testing.T, m *Monitor) {
	t.Helper()
	if err := m.CheckNow(context.Background()); err != nil {
		t.Fatalf("CheckNow: %v", err)
	}
}
