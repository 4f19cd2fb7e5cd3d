package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// fakeWorker is a loopback upstream whose behaviour a test sets: it answers,
// fails, streams, or holds a request until the router hangs up.
type fakeWorker struct {
	name     string
	url      string
	status   atomic.Int32 // answer with this status (0 = 200)
	hold     atomic.Bool  // non-streaming: answer only when the router hangs up
	slow     atomic.Bool  // answer only once the gate opens
	events   atomic.Int32 // SSE events per streaming answer
	gate     chan struct{}
	requests atomic.Int32
	aborted  atomic.Int32 // requests whose connection the router closed
	lastBody atomic.Value
	models   atomic.Value // the model its /v1/models lists; unset = 404
	metrics  atomic.Value // its /metrics text; unset = 404
	ln       net.Listener
	srv      *fasthttp.Server
	done     chan struct{}
}

func startFake(t *testing.T, name string) *fakeWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeWorker{name: name, url: "http://" + ln.Addr().String(), ln: ln, gate: make(chan struct{}), done: make(chan struct{})}
	f.events.Store(3)
	f.srv = &fasthttp.Server{Handler: f.handle}
	go func() { defer close(f.done); _ = f.srv.Serve(ln) }()
	t.Cleanup(func() {
		f.open()
		_ = f.srv.Shutdown()
		<-f.done
	})
	return f
}

// open lets held streams finish.
func (f *fakeWorker) open() {
	select {
	case <-f.gate:
	default:
		close(f.gate)
	}
}

// waitHangUp blocks until the peer closes conn.
func waitHangUp(conn net.Conn) bool {
	var b [1]byte
	_, err := conn.Read(b[:])
	return err != nil
}

func (f *fakeWorker) handle(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		if m, _ := f.metrics.Load().(string); m != "" && string(ctx.Path()) == "/metrics" {
			ctx.SetBodyString(m)
			return
		}
		if m, _ := f.models.Load().(string); m != "" && string(ctx.Path()) == "/v1/models" {
			fmt.Fprintf(ctx, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, m)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusNotFound) // no /v1/models: serves any model
		return
	}
	f.requests.Add(1)
	f.lastBody.Store(string(ctx.PostBody()))
	ctx.Response.Header.Set("x-worker-id", f.name)
	ctx.Response.Header.Set("Keep-Alive", "timeout=5")
	if s := f.status.Load(); s != 0 {
		ctx.SetStatusCode(int(s))
		ctx.SetBodyString(`{"error":{"message":"induced"}}`)
		return
	}
	if f.slow.Load() {
		<-f.gate
	}
	if f.hold.Load() {
		if waitHangUp(ctx.Conn()) {
			f.aborted.Add(1)
		}
		return
	}
	if strings.Contains(string(ctx.PostBody()), `"do_remote_decode":true`) {
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,`+
			`"do_remote_decode":false,"remote_engine_id":%q,"remote_block_ids":[1,2],"remote_host":"127.0.0.1","remote_port":5600}}`, f.name)
		return
	}
	if strings.Contains(string(ctx.PostBody()), `"stream":true`) {
		f.stream(ctx)
		return
	}
	ctx.SetContentType("application/json")
	fmt.Fprintf(ctx, `{"worker":%q,"choices":[{"text":"ok"}]}`, f.name)
}

// stream sends one event, waits for the gate (or for the router to hang
// up), then sends the rest and [DONE].
func (f *fakeWorker) stream(ctx *fasthttp.RequestCtx) {
	conn, n := ctx.Conn(), int(f.events.Load())
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		fmt.Fprintf(w, "data: {\"n\":0}\n\n")
		_ = w.Flush()
		hungUp := make(chan bool, 1)
		go func() { hungUp <- waitHangUp(conn) }()
		select {
		case <-f.gate:
			_ = conn.SetReadDeadline(time.Unix(1, 0))
			<-hungUp
			_ = conn.SetReadDeadline(time.Time{})
		case <-hungUp:
			f.aborted.Add(1)
			return
		}
		for i := 1; i < n; i++ {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			_ = w.Flush()
		}
		fmt.Fprintf(w, "data: [DONE]\n\n")
	})
}

// testRouter is a proxy on a loopback port in front of fake workers.
type testRouter struct {
	proxy *Proxy
	index *affinity.Index
	loads *affinity.LoadTable
	url   string
	set   *metrics.Set
}

func startRouter(t *testing.T, cfg Config, workers ...*fakeWorker) *testRouter {
	t.Helper()
	var ws []Worker
	for i, w := range workers {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: w.url, Role: RoleRegular})
	}
	return startRouterWith(t, cfg, "", affinity.PolicyCacheAware, ws)
}

// startPDRouter disaggregates: prefill workers get ids 1..n, decode ones follow.
func startPDRouter(t *testing.T, mode, prefillPolicy string, prefill, decode []*fakeWorker) *testRouter {
	t.Helper()
	var ws []Worker
	for _, w := range prefill {
		ws = append(ws, Worker{ID: affinity.WorkerID(len(ws) + 1), URL: w.url, Role: RolePrefill})
	}
	for _, w := range decode {
		ws = append(ws, Worker{ID: affinity.WorkerID(len(ws) + 1), URL: w.url, Role: RoleDecode})
	}
	return startRouterWith(t, Config{}, mode, prefillPolicy, ws)
}

func newTestRouter(t *testing.T, policy string, loads *affinity.LoadTable, index *affinity.Index) *affinity.Router {
	t.Helper()
	p, err := affinity.NewPolicy(affinity.Settings{Policy: policy, Thresholds: affinity.DefaultThresholds(),
		MissPlacement: affinity.PlaceLeastLoad, BlockSize: 16}, index)
	if err != nil {
		t.Fatal(err)
	}
	return affinity.NewRouter(p, loads, index, 16, nil)
}

func startRouterWith(t *testing.T, cfg Config, pdMode, policy string, ws []Worker) *testRouter {
	t.Helper()
	loads := affinity.NewLoadTable(nil)
	index := affinity.NewIndex(affinity.SystemClock{}, 1<<16)
	set := metrics.NewSet()
	if cfg.Retry.InitialBackoff == 0 {
		cfg.Retry.InitialBackoff = time.Millisecond
	}
	deps := Deps{Loads: loads, Index: index, Router: newTestRouter(t, policy, loads, index),
		Metrics: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if pdMode != "" {
		deps.PD = &PD{Mode: pdMode, Prefill: deps.Router, Decode: newTestRouter(t, affinity.PolicyLeastLoad, loads, index)}
	}
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	p.Fleet().SetWorkers(ws)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		<-done
	})
	return &testRouter{proxy: p, index: index, loads: loads, url: "http://" + ln.Addr().String(), set: set}
}

// load is the router's local in-flight count on worker id.
func (r *testRouter) load(id affinity.WorkerID) int64 { return r.loads.Get(id).Local() }

// totalLoad is the sum of the router's local in-flight counts.
func (r *testRouter) totalLoad() int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += l.Local() })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func post(t *testing.T, url, path, body string) (*http.Response, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
