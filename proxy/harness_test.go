package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// induced is the error body of a worker told to fail.
const induced = `{"error":{"message":"induced"}}`

func startFake(t *testing.T, name string) *fakeworker.Worker { return fakeworker.Start(t, name) }

// testRouter is a proxy on a loopback port in front of fake workers.
type testRouter struct {
	proxy *Proxy
	index *affinity.Index
	loads *affinity.LoadTable
	url   string
	set   *metrics.Set
}

func startRouter(t *testing.T, cfg Config, workers ...*fakeworker.Worker) *testRouter {
	t.Helper()
	var ws []Worker
	for i, w := range workers {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: w.URL, Role: RoleRegular})
	}
	return startRouterWith(t, cfg, "", affinity.PolicyCacheAware, ws)
}

// startPDRouter disaggregates: prefill workers get ids 1..n, decode ones follow.
func startPDRouter(t *testing.T, mode, prefillPolicy string, prefill, decode []*fakeworker.Worker) *testRouter {
	t.Helper()
	var ws []Worker
	for _, w := range prefill {
		ws = append(ws, Worker{ID: affinity.WorkerID(len(ws) + 1), URL: w.URL, Role: RolePrefill})
	}
	for _, w := range decode {
		ws = append(ws, Worker{ID: affinity.WorkerID(len(ws) + 1), URL: w.URL, Role: RoleDecode})
	}
	return startRouterWith(t, Config{}, mode, prefillPolicy, ws)
}

func newTestRouter(policy string, loads *affinity.LoadTable, index *affinity.Index) (*affinity.Router, error) {
	p, err := affinity.NewPolicy(affinity.Settings{Policy: policy, Thresholds: affinity.DefaultThresholds(),
		MissPlacement: affinity.PlaceLeastPrefill, BlockSize: 16}, index)
	if err != nil {
		return nil, err
	}
	return affinity.NewRouter(p, loads, index, 16, nil), nil
}

// startRouterHealth is startRouter with health tracked by h.
func startRouterHealth(t *testing.T, cfg Config, h Health, workers ...*fakeworker.Worker) *testRouter {
	t.Helper()
	var ws []Worker
	for i, w := range workers {
		ws = append(ws, Worker{ID: affinity.WorkerID(i + 1), URL: w.URL, Role: RoleRegular})
	}
	return startRouterDeps(t, cfg, "", affinity.PolicyCacheAware, ws, h)
}

func startRouterWith(t *testing.T, cfg Config, pdMode, policy string, ws []Worker) *testRouter {
	t.Helper()
	return startRouterDeps(t, cfg, pdMode, policy, ws, nil)
}

func startRouterDeps(t *testing.T, cfg Config, pdMode, policy string, ws []Worker, h Health) *testRouter {
	t.Helper()
	if cfg.Retry.InitialBackoff == 0 {
		cfg.Retry.InitialBackoff = time.Millisecond
	}
	p, err := buildProxy(cfg, pdMode, policy, ws, h)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRouter{proxy: p, index: p.deps.Index, loads: p.deps.Loads, set: p.deps.Metrics}
	// Registered before serving, so it runs after the shutdown: on every
	// path a test takes, a request's prefill backlog goes back with it.
	t.Cleanup(func() {
		if r.totalLoad() == 0 && r.totalBacklog() != 0 {
			t.Errorf("prefill backlog %d bytes with no request in flight", r.totalBacklog())
		}
	})
	r.url = serveProxy(t, p)
	return r
}

// serveProxy serves p on a loopback port until the test ends, and returns
// its base URL.
func serveProxy(t *testing.T, p *Proxy) string {
	t.Helper()
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
	return "http://" + ln.Addr().String()
}

// buildProxy makes a proxy with its own counters, index and metrics, routing
// with policy (and least_load for decode) over the workers ws.
func buildProxy(cfg Config, pdMode, policy string, ws []Worker, h Health) (*Proxy, error) {
	return buildProxyLogged(cfg, pdMode, policy, ws, h, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// buildProxyWith builds a regular proxy whose Deps adjust changes.
func buildProxyWith(cfg Config, policy string, ws []Worker, adjust func(*Deps)) (*Proxy, error) {
	return buildProxyAll(cfg, "", policy, ws, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), adjust)
}

func buildProxyLogged(cfg Config, pdMode, policy string, ws []Worker, h Health, log *slog.Logger) (*Proxy, error) {
	return buildProxyAll(cfg, pdMode, policy, ws, h, log, nil)
}

func buildProxyAll(cfg Config, pdMode, policy string, ws []Worker, h Health, log *slog.Logger, adjust func(*Deps)) (*Proxy, error) {
	loads := affinity.NewLoadTable(nil)
	index := affinity.NewIndex(clock.RealClock{}, 1<<16)
	router, err := newTestRouter(policy, loads, index)
	if err != nil {
		return nil, err
	}
	deps := Deps{Loads: loads, Index: index, Router: router, Metrics: metrics.NewSet(),
		Logger: log, Health: h}
	if pdMode != "" {
		decode, err := newTestRouter(affinity.PolicyLeastLoad, loads, index)
		if err != nil {
			return nil, err
		}
		deps.PD = &PD{Mode: pdMode, Prefill: router, Decode: decode}
	}
	if adjust != nil {
		adjust(&deps)
	}
	p, err := New(cfg, deps)
	if err != nil {
		return nil, err
	}
	p.Fleet().SetWorkers(ws)
	return p, nil
}

// load is the router's local in-flight count on worker id.
func (r *testRouter) load(id affinity.WorkerID) int64 { return r.loads.Get(id).Local() }

// totalLoad is the sum of the router's local in-flight counts.
func (r *testRouter) totalLoad() int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += l.Local() })
	return n
}

// totalBacklog is the sum of the router's own prefill backlogs.
func (r *testRouter) totalBacklog() int64 {
	var n int64
	r.loads.Each(func(l *affinity.Load) { n += l.Backlog() })
	return n
}

// waitDeadline is how long a test waits for what it cannot be told about.
const waitDeadline = 5 * time.Second

// post posts body to path with the header pairs given (name, value, ...),
// and returns the response, its body read, and the body.
func post(t *testing.T, url, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
