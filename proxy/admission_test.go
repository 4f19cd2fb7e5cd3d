package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// postWith posts a completion with extra headers and returns the status
// and body.
func postWith(t *testing.T, url string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hello"}`))
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
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

func classesConfig() Config {
	return Config{Admission: admission.Config{Classes: admission.DefaultClasses, QueueSize: 10, QueueTimeout: time.Minute}}
}

func TestABadPriorityIsA400AndReachesNoWorker(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, classesConfig(), w)
	for _, h := range [][]string{{"x-priority", "urgent"}, {"x-smg-priority", "-1"}, {"x-dynamo-request-priority", "4"}} {
		status, body := postWith(t, r.url, h...)
		if status != http.StatusBadRequest || !strings.Contains(body, h[0]) || !strings.Contains(body, "system") {
			t.Errorf("%s: %s: %d %s; want a 400 naming the header and the classes", h[0], h[1], status, body)
		}
	}
	if n := int(w.Inference.Load()); n != 0 {
		t.Fatalf("%d requests reached the worker", n)
	}
	if status, _ := postWith(t, r.url, "x-smg-priority", "bulk"); status != http.StatusOK {
		t.Fatalf("a known class: %d", status)
	}
	resp, _ := post(t, r.url, "/v1/completions", `{"model":"m","prompt":"hello"}`)
	if resp.Header.Get("x-admission-queue-ms") != "0" {
		t.Fatalf("x-admission-queue-ms %q, want 0 for a request admitted at once", resp.Header.Get("x-admission-queue-ms"))
	}
}

func TestAPriorityHeaderWithClassesDisabledIsTheDefault(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	for _, v := range []string{"system", "-1", "nonsense"} {
		if status, body := postWith(t, r.url, "x-priority", v); status != http.StatusOK {
			t.Fatalf("x-priority %s without classes: %d %s; want it ignored", v, status, body)
		}
	}
	if !strings.Contains(metricsText(r), `vllm_router_admission_admitted_total{class="default",tenant="anonymous"} 3`) {
		t.Fatalf("the requests count in the default class:\n%s", metricsText(r))
	}
}

func TestABadTenantHeaderIsA400(t *testing.T) {
	w := startFake(t, "w1")
	cfg := classesConfig()
	cfg.Admission.TenantHeader = "x-tenant"
	r := startRouter(t, cfg, w)
	if status, body := postWith(t, r.url, "x-tenant", strings.Repeat("a", 65)); status != http.StatusBadRequest ||
		!strings.Contains(body, "x-tenant") {
		t.Fatalf("a 65-byte tenant: %d %s", status, body)
	}
	if status, body := postWith(t, r.url, "x-tenant", `a"b`); status != http.StatusBadRequest {
		t.Fatalf("a quote in a tenant: %d %s", status, body)
	}
	postWith(t, r.url, "x-tenant", "team-a")
	if !strings.Contains(metricsText(r), `vllm_router_admission_admitted_total{class="default",tenant="team-a"} 1`) {
		t.Fatal("the tenant header names the tenant")
	}
}

// saturated reports worker 1's engine as full at one request, a new
// reading at every call.
func saturated(dst []admission.Reading) []admission.Reading {
	return append(dst, admission.Reading{Worker: 1, At: time.Now(), Running: 1, Waiting: 1})
}

func startSaturated(t *testing.T, cfg Config, w *fakeworker.Worker) *testRouter {
	t.Helper()
	p, err := buildProxyWith(cfg, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}},
		func(d *Deps) { d.Engines = saturated })
	if err != nil {
		t.Fatal(err)
	}
	return serveRouter(t, p)
}

func TestASaturatedEngineMakesRequestsWaitAtTheRouterAndTheRefusalSaysWhy(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	cfg := classesConfig()
	cfg.Admission.QueueSize = 1
	cfg.Admission.QueueTimeout = 300 * time.Millisecond
	r := startSaturated(t, cfg, w)
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Limit == 1 }, "the engines' limit")
	first := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url, "x-priority", "bulk"); first <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return int(w.Inference.Load()) == 1 }, "the first request at the worker")
	queued := make(chan string, 1)
	go func() { _, b := postWith(t, r.url, "x-priority", "bulk"); queued <- b }()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "a request queued")
	status, body := postWith(t, r.url, "x-priority", "bulk")
	if status != http.StatusTooManyRequests || !strings.Contains(body, "class bulk") || !strings.Contains(body, "saturation") {
		t.Fatalf("the queue full: %d %s; want a 429 naming the class and the saturation", status, body)
	}
	if b := <-queued; !strings.Contains(b, "timed out") || !strings.Contains(b, "saturation") || !strings.Contains(b, "tenant anonymous") {
		t.Fatalf("the queued request's 408 body: %s", b)
	}
	if n := int(w.Inference.Load()); n != 1 {
		t.Fatalf("%d requests reached the saturated worker, want 1", n)
	}
	w.Open()
	if s := <-first; s != http.StatusOK {
		t.Fatalf("the admitted request: %d", s)
	}
	if status, _ := postWith(t, r.url); status != http.StatusOK {
		t.Fatal("the slot was not released when the first request ended")
	}
	text := metricsText(r)
	for _, want := range []string{`vllm_router_admission_refused_total{class="bulk",tenant="anonymous",reason="queue_full"} 1`,
		`vllm_router_admission_refused_total{class="bulk",tenant="anonymous",reason="queue_timeout"} 1`,
		`vllm_router_admission_limit 1`, `vllm_router_admission_in_flight{class="bulk"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestAnInteractiveRequestOvertakesQueuedBulk(t *testing.T) {
	w := startFake(t, "w1")
	var mu sync.Mutex
	var order []string // the classes in the order they reached the worker
	w.Set(func(e *fakeworker.Exchange) {
		mu.Lock()
		order = append(order, e.Req.Header.Get("x-priority"))
		mu.Unlock()
		fakeworker.Hold()(e)
	})
	r := startSaturated(t, classesConfig(), w)
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Limit == 1 }, "the engines' limit")
	done := make(chan struct{}, 3)
	send := func(class string) { go func() { postWith(t, r.url, "x-priority", class); done <- struct{}{} }() }
	send("bulk")
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the first at the worker")
	send("bulk")
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "bulk queued")
	send("interactive")
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 2 }, "interactive queued")
	w.Open()
	<-done
	<-done
	<-done
	if want := []string{"bulk", "interactive", "bulk"}; !slices.Equal(order, want) {
		t.Fatalf("requests reached the worker in the order %v, want %v: the interactive one before the queued bulk", order, want)
	}
}

// serveRouter serves p on a loopback port until the test ends, as a
// testRouter.
func serveRouter(t *testing.T, p *Proxy) *testRouter {
	t.Helper()
	url := serveProxy(t, p)
	return &testRouter{proxy: p, index: p.deps.Index, loads: p.deps.Loads, url: url, set: p.deps.Metrics}
}

func metricsText(r *testRouter) string {
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	return b.String()
}

// TestAClientThatLeavesWhileQueuedFreesItsPlaceAtOnce: the only place in
// the queue is held by a request whose client closes its connection; the
// watcher notices while the slot is still taken (long before the queue's
// minute), the place goes to the next request, which is admitted when the
// slot frees, and the one that left never reaches the worker.
func TestAClientThatLeavesWhileQueuedFreesItsPlaceAtOnce(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	cfg := classesConfig()
	cfg.Admission.QueueSize = 1
	r := startSaturated(t, cfg, w)
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Limit == 1 }, "the engines' limit")
	first := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url); first <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the first request at the worker")
	conn, _ := rawPost(t, r.url, "/v1/completions", completion("leaves", false))
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "a request queued")
	conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 0 }, "the queued request's place freed")
	if n := metric(t, r, `vllm_router_admission_refused_total{class="default",tenant="anonymous",reason="client_gone"}`); n != 1 {
		t.Fatalf("refused for client_gone %v, want 1", n)
	}
	next := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url); next <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "the next request queued")
	w.Open()
	if s := <-first; s != http.StatusOK {
		t.Fatalf("the first request: %d", s)
	}
	if s := <-next; s != http.StatusOK {
		t.Fatalf("the request queued after the one that left: %d, want 200", s)
	}
	if n := w.Inference.Load(); n != 2 {
		t.Fatalf("%d requests reached the worker, want 2: the one that left never does", n)
	}
}

// TestAHalfClosedClientStaysQueued: a client that shuts down its sending
// side after its request (a FIN) but still reads is probed while queued,
// not dropped: it reads the probe's interim 100 Continue, then its answer
// once the slot frees.
func TestAHalfClosedClientStaysQueued(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	r := startSaturated(t, classesConfig(), w)
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Limit == 1 }, "the engines' limit")
	first := make(chan int, 1)
	go func() { s, _ := postWith(t, r.url); first <- s }()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the first request at the worker")
	conn, br := rawPost(t, r.url, "/v1/completions", completion("stays", false))
	defer conn.Close()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 }, "a request queued")
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("read %q, %v; want the probe's interim response", line, err)
	}
	if q := r.proxy.AdmissionStats().Queued; q != 1 {
		t.Fatalf("%d queued after the probe, want the half-closed client still queued", q)
	}
	w.Open()
	if s := <-first; s != http.StatusOK {
		t.Fatalf("the first request: %d", s)
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "HTTP/1.1 200") {
		t.Fatalf("the half-closed client read %q after the probe, want its 200", rest)
	}
}

// Without keys a stranger names its tenants: made up per request and held
// in flight, they take the tenant tables no further than their budget
// (vllm_router_admission_tenant_bytes says how far), and the rest share
// the overflow tenant.
func TestMadeUpTenantHeadersStayWithinTheTenantBudget(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	cfg := classesConfig()
	cfg.Admission.TenantHeader = "x-tenant"
	const budget = 4 * (256 + 9)
	cfg.Admission.MaxTenantBytes = budget
	r := startRouter(t, cfg, w)
	const n = 12
	done := make(chan int, n)
	for i := range n {
		go func() { s, _ := postWith(t, r.url, "x-tenant", fmt.Sprintf("tenant-%02d", i)); done <- s }()
	}
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == n }, "every request at the worker")
	if got := metric(t, r, "vllm_router_admission_tenant_bytes"); got > budget || got == 0 {
		t.Fatalf("vllm_router_admission_tenant_bytes %v, want at most the budget %d", got, budget)
	}
	w.Open()
	for range n {
		if s := <-done; s != http.StatusOK {
			t.Fatalf("a request: %d", s)
		}
	}
	if got := metric(t, r, `vllm_router_admission_admitted_total{class="default",tenant="(overflow)"}`); got != n-4 {
		t.Fatalf("%v requests under the overflow tenant, want %d", got, n-4)
	}
	if got := metric(t, r, "vllm_router_admission_tenant_bytes"); got != 0 {
		t.Fatalf("vllm_router_admission_tenant_bytes %v with nothing in flight", got)
	}
}
