package health

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) { leaktest.Main(m) }

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig is DefaultConfig with probe timings fit for loopback tests.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	cfg.Timeout = 2 * time.Second
	return cfg
}

// newTestMonitor returns a Monitor on a k8s FakeClock watching the given targets,
// each of which has answered one round of health checks.
func newTestMonitor(t testing.TB, cfg Config, targets ...Target) (*Monitor, *testingclock.FakeClock) {
	t.Helper()
	clock := testingclock.NewFakeClock(t0)
	m, err := New(cfg, clock, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := m.SetWorkers(targets); err != nil {
		t.Fatalf("SetWorkers: %v", err)
	}
	checkRound(t, m)
	m.Tick() // settle the membership change before tests count notifications
	return m, clock
}

// workersByTest holds each test's healthy loopback worker.
var workersByTest sync.Map // testing.TB -> *fakeWorker

// healthyWorker returns the test's loopback worker, started on first use,
// whose health endpoint answers 200.
func healthyWorker(t testing.TB) *fakeWorker {
	t.Helper()
	if fw, ok := workersByTest.Load(t); ok {
		return fw.(*fakeWorker)
	}
	fw := startFakeWorker(t)
	workersByTest.Store(t, fw)
	t.Cleanup(func() { workersByTest.Delete(t) })
	return fw
}

// targets returns workers 1..n, all served by the test's healthy loopback
// worker.
func targets(t testing.TB, n int) []Target {
	url := healthyWorker(t).url
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{ID: WorkerID(i + 1), URL: url}
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

// waitDeadline is how long a test waits for what it cannot be told about.
const waitDeadline = 5 * time.Second

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fakeWorker is a loopback vLLM stand-in: a health endpoint that can be
// flipped healthy or unhealthy or made to hang, a /metrics page whose engine
// counters the test sets (or that never ends), and a /v1/completions that
// answers recovery probes, after a delay, or only once released.
type fakeWorker struct {
	url     string
	code    atomic.Int32                  // status /health answers
	probes  atomic.Int32                  // requests seen on /health
	gate    atomic.Pointer[chan struct{}] // when set, /health waits for it to close
	waiting chan struct{}                 // receives when a probe starts waiting at the gate

	tokens      atomic.Int64 // vllm:generation_tokens_total
	running     atomic.Int64 // vllm:num_requests_running
	queued      atomic.Int64 // vllm:num_requests_waiting
	metricsCode atomic.Int32 // status /metrics answers
	endless     atomic.Bool  // /metrics streams comment lines until the client leaves
	scrapes     atomic.Int32 // requests seen on /metrics

	genCode   atomic.Int32                  // status /v1/completions answers
	genDelay  atomic.Int64                  // nanoseconds /v1/completions takes
	genGate   atomic.Pointer[chan struct{}] // when set, /v1/completions waits for it to close
	genSeen   chan string                   // "<Authorization>\n<body>" of every /v1/completions request
	genHeld   chan struct{}                 // receives when a generation starts waiting at genGate
	generated atomic.Int32                  // requests seen on /v1/completions

	stop chan struct{}
}

func startFakeWorker(t testing.TB) *fakeWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	fw := &fakeWorker{
		url:     "http://" + ln.Addr().String(),
		waiting: make(chan struct{}, 16),
		genSeen: make(chan string, 64),
		genHeld: make(chan struct{}, 16),
		stop:    make(chan struct{}),
	}
	fw.code.Store(fasthttp.StatusOK)
	fw.metricsCode.Store(fasthttp.StatusOK)
	fw.genCode.Store(fasthttp.StatusOK)
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
	switch string(ctx.Path()) {
	case "/health":
		fw.health(ctx)
	case "/metrics":
		fw.metrics(ctx)
	case "/v1/completions":
		fw.generate(ctx)
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
}

func (fw *fakeWorker) health(ctx *fasthttp.RequestCtx) {
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

func (fw *fakeWorker) metrics(ctx *fasthttp.RequestCtx) {
	fw.scrapes.Add(1)
	ctx.SetStatusCode(int(fw.metricsCode.Load()))
	if fw.endless.Load() {
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for {
				select {
				case <-fw.stop:
					return
				default:
				}
				if _, err := w.WriteString("# an endless page of comments, 64 bytes a line, padding padding\n"); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
		})
		return
	}
	fmt.Fprintf(ctx, "# HELP vllm:num_requests_running Number of requests running.\n"+
		"# TYPE vllm:num_requests_running gauge\n"+
		"vllm:num_requests_running{engine=\"0\",model_name=\"m {x}\"} %d\n"+
		"# TYPE vllm:generation_tokens_total counter\n"+
		"vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"+
		"vllm:generation_tokens_created{engine=\"0\",model_name=\"m\"} 1.7e+09\n"+
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\n"+
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n",
		fw.running.Load(), fw.tokens.Load(), fw.queued.Load())
}

func (fw *fakeWorker) generate(ctx *fasthttp.RequestCtx) {
	fw.generated.Add(1)
	select {
	case fw.genSeen <- string(ctx.Request.Header.Peek("Authorization")) + "\n" + string(ctx.PostBody()):
	default:
	}
	if g := fw.genGate.Load(); g != nil {
		fw.genHeld <- struct{}{}
		select {
		case <-*g:
		case <-fw.stop:
			return
		}
	}
	if d := time.Duration(fw.genDelay.Load()); d > 0 {
		select { // the engine's own pace, not a test waiting
		case <-time.After(d):
		case <-fw.stop:
		}
	}
	ctx.SetStatusCode(int(fw.genCode.Load()))
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"choices":[{"text":"!"}],"usage":{"completion_tokens":1}}`)
}

// hold makes /health hang until the returned release is called.
func (fw *fakeWorker) hold() (release func()) {
	g := make(chan struct{})
	fw.gate.Store(&g)
	return func() { fw.gate.Store(nil); close(g) }
}

// wedge makes /v1/completions hang until the returned release is called;
// calls after the first do nothing.
func (fw *fakeWorker) wedge() (release func()) {
	g := make(chan struct{})
	fw.genGate.Store(&g)
	var once sync.Once
	return func() { once.Do(func() { fw.genGate.Store(nil); close(g) }) }
}

func checkRound(t testing.TB, m *Monitor) {
	t.Helper()
	if err := m.CheckNow(context.Background()); err != nil {
		t.Fatalf("CheckNow: %v", err)
	}
}

// tasksRound runs the engine scrapes and recovery probes the last Tick asked
// for, waits for them, then delivers pending OnChange notifications: one
// round of what Run does in the background.
func tasksRound(m *Monitor) {
	var wg sync.WaitGroup
	m.launch(context.Background(), &wg, make(chan struct{}, maxConcurrentProbes))
	wg.Wait()
	m.notify.deliver()
}
