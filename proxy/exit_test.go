package proxy

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/logsink"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// exitRig is a proxy whose request log and request spans a test reads,
// once it was shut down: every request it took has ended by then, streams
// included.
type exitRig struct {
	url   string
	proxy *Proxy
	log   logsink.Sink
	spans *tracetest.InMemoryExporter
	stop  func()
	sent  []sentRequest
	mu    sync.Mutex
}

// sentRequest is a request a case sent, by the request id it carried, and
// what its line must say.
type sentRequest struct {
	id      string
	status  int
	errType string
	minSpan time.Duration // the least its span lasts
}

func startExitRig(t *testing.T, cfg Config, pdMode string, ws []Worker) *exitRig {
	t.Helper()
	if cfg.Retry.InitialBackoff == 0 {
		cfg.Retry.InitialBackoff = time.Millisecond
	}
	r := &exitRig{spans: tracetest.NewInMemoryExporter()}
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	p, err := buildProxyAll(cfg, pdMode, affinity.PolicyCacheAware, ws, nil, slog.New(slog.NewJSONHandler(&r.log, nil)),
		func(d *Deps) { d.Tracer = provider.Tracer("kvrouter") })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			<-done
		})
	}
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) }) // it empties the exporter
	t.Cleanup(r.stop)
	r.url, r.proxy = "http://"+ln.Addr().String(), p
	return r
}

// send makes a request with x-request-id id, reads its answer to its end
// (or to where the stream broke) and records what its line must say.
func (r *exitRig) send(t *testing.T, id, method, path, body string, wantStatus int, wantErr string, headers ...string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-request-id", id)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if chunked, ok := strings.CutPrefix(body, "chunked:"); ok { // sent without a length
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(chunked)), -1
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // a cut stream ends in an error
	resp.Body.Close()
	if resp.StatusCode != wantStatus || resp.Header.Get("x-request-id") != id {
		t.Errorf("%s: status %d, x-request-id %q; want %d, %q", id, resp.StatusCode, resp.Header.Get("x-request-id"), wantStatus, id)
	}
	r.expect(id, wantStatus, wantErr)
}

// lastSpansAtLeast says that the span of the request sent last lasts at
// least d.
func (r *exitRig) lastSpansAtLeast(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[len(r.sent)-1].minSpan = d
}

func (r *exitRig) expect(id string, status int, errType string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, sentRequest{id: id, status: status, errType: errType})
}

// check shuts the proxy down, then finds, for every request sent, exactly
// one line in the request log and exactly one request span, both saying
// how it ended.
func (r *exitRig) check(t *testing.T) {
	t.Helper()
	r.stop()
	lines := map[string][]map[string]any{}
	for _, l := range r.log.Messages(t, "request") {
		id, _ := l["request_id"].(string)
		lines[id] = append(lines[id], l)
	}
	spans := map[string][]tracetest.SpanStub{}
	for _, s := range r.spans.GetSpans() {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "kvrouter.request_id" {
				spans[a.Value.AsString()] = append(spans[a.Value.AsString()], s)
			}
		}
	}
	for _, s := range r.sent {
		ls, ss := lines[s.id], spans[s.id]
		if len(ls) != 1 || len(ss) != 1 {
			t.Errorf("%s: %d request-log lines and %d request spans, want one of each", s.id, len(ls), len(ss))
			continue
		}
		got, _ := ls[0]["error_type"].(string)
		if ls[0]["status"] != float64(s.status) || got != s.errType {
			t.Errorf("%s: logged status %v error_type %q, want %d %q", s.id, ls[0]["status"], got, s.status, s.errType)
		}
		if st := spanStatus(ss[0]); st != s.status {
			t.Errorf("%s: span status %d, want %d", s.id, st, s.status)
		}
		if d := ss[0].EndTime.Sub(ss[0].StartTime); d < s.minSpan {
			t.Errorf("%s: its span lasts %v, less than the %v it waited", s.id, d, s.minSpan)
		}
	}
	if n := len(r.log.Messages(t, "request")); n != len(r.sent) {
		t.Errorf("%d request-log lines for %d requests", n, len(r.sent))
	}
}

func spanStatus(s tracetest.SpanStub) int {
	for _, a := range s.Attributes {
		if a.Key == "http.response.status_code" {
			return int(a.Value.AsInt64())
		}
	}
	return 0
}

func regular(ws ...*fakeworker.Worker) []Worker {
	var out []Worker
	for i, w := range ws {
		out = append(out, Worker{ID: affinity.WorkerID(i + 1), URL: w.URL, Role: RoleRegular})
	}
	return out
}

// TestEveryRequestEndsOnceWithOneLogLineAndOneSpan: whatever way a request
// ends, refused at the door (no key, a bad key, too large, the body budget
// spent, the admission queue full or timed out, an Expect: 100-continue
// refused on its headers), refused later (a malformed body, no eligible
// worker, a stored response no worker holds), answered whole, streamed,
// cut mid-stream, pinned to the worker that holds a stored response (whole
// or streamed), or disaggregated, it leaves exactly one request-log line
// and one request span, saying how it ended.
func TestEveryRequestEndsOnceWithOneLogLineAndOneSpan(t *testing.T) {
	const body = `{"model":"m","prompt":"hello"}`
	cases := []struct {
		name   string
		cfg    Config
		pdMode string
		run    func(t *testing.T, r *exitRig, w *fakeworker.Worker)
		noPool bool // the proxy has no workers
	}{
		{name: "no key", cfg: Config{APIKeys: []string{"k1"}}, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "no-key", "POST", "/v1/completions", body, 401, "unauthorized")
		}},
		{name: "bad key", cfg: Config{APIKeys: []string{"k1"}}, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "bad-key", "POST", "/v1/completions", body, 401, "unauthorized", "Authorization", "Bearer k2")
			r.send(t, "good-key", "POST", "/v1/completions", body, 200, "", "Authorization", "Bearer k1")
		}},
		{name: "oversized", cfg: Config{MaxPayloadSize: 64}, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			big := `{"model":"m","prompt":"` + strings.Repeat("x", 100) + `"}`
			r.send(t, "too-large", "POST", "/v1/completions", big, 413, "payload_too_large")
			r.send(t, "too-large-chunked", "POST", "/v1/completions", "chunked:"+big, 413, "payload_too_large")
		}},
		{name: "body budget full", cfg: Config{Edge: Edge{MaxBufferedBodyBytes: 16}}, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "bodies-held", "POST", "/v1/completions", body, 503, "bodies_held")
		}},
		{name: "malformed body", run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "malformed", "POST", "/v1/completions", `{"model":`, 400, "bad_request")
		}},
		{name: "admission queue full", cfg: Config{Admission: admission.Config{Capacity: 1}},
			run: func(t *testing.T, r *exitRig, w *fakeworker.Worker) {
				holding(t, r, w, func() { r.send(t, "queue-full", "POST", "/v1/completions", body, 429, "rate_limited") })
			}},
		{name: "admission queue timeout", cfg: Config{Admission: admission.Config{Capacity: 1, QueueSize: 1, QueueTimeout: 20 * time.Millisecond}},
			run: func(t *testing.T, r *exitRig, w *fakeworker.Worker) {
				holding(t, r, w, func() {
					r.send(t, "queue-timeout", "POST", "/v1/completions", body, 408, "queue_timeout")
					r.lastSpansAtLeast(20 * time.Millisecond) // traced from its arrival, queueing included
				})
			}},
		{name: "expect 100-continue without a key", cfg: Config{APIKeys: []string{"k1"}},
			run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
				sendExpecting(t, r, "expect-no-key", 401, "unauthorized")
			}},
		{name: "no eligible worker", noPool: true, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "no-worker", "POST", "/v1/completions", body, 503, "no_eligible_worker")
			r.send(t, "no-worker-info", "GET", "/get_model_info", "", 503, "no_eligible_worker")
		}},
		{name: "unknown stored response", run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "stored-404", "GET", "/v1/responses/resp_nobody", "", 404, "not_found")
			r.send(t, "previous-404", "POST", "/v1/responses", `{"model":"m","input":"hi","previous_response_id":"resp_nobody"}`,
				404, "not_found")
		}},
		{name: "answered", run: func(t *testing.T, r *exitRig, w *fakeworker.Worker) {
			r.send(t, "whole", "POST", "/v1/completions", body, 200, "")
			r.send(t, "streamed", "POST", "/v1/completions", completion("hello", true), 200, "")
			r.send(t, "engine-info", "GET", "/get_model_info", "", 404, "worker_client_error") // the fake's own 404
			w.Set(fakeworker.Status(400, induced))
			r.send(t, "worker-400", "POST", "/v1/completions", body, 400, "worker_client_error")
			w.Set(fakeworker.StreamThenCut(2))
			r.send(t, "cut", "POST", "/v1/completions", completion("hello", true), 200, "stream_cut")
		}},
		{name: "stored response", run: func(t *testing.T, r *exitRig, w *fakeworker.Worker) {
			w.SetEvery(func(e *fakeworker.Exchange) {
				if e.Req.URL.Query().Get("stream") == "true" {
					fakeworker.Stream(2)(e)
					return
				}
				e.JSON(200, `{"id":"resp_1","object":"response"}`)
			})
			// made through the router, which learns its owner from the answer
			r.send(t, "stored-made", "POST", "/v1/responses", `{"model":"m","input":"hi"}`, 200, "")
			r.send(t, "stored", "GET", "/v1/responses/resp_1", "", 200, "")
			r.send(t, "stored-streamed", "GET", "/v1/responses/resp_1?stream=true", "", 200, "")
		}},
		{name: "disaggregated sequential", pdMode: PDVLLM, run: func(t *testing.T, r *exitRig, w *fakeworker.Worker) {
			r.send(t, "pd", "POST", "/v1/completions", body, 200, "")
			r.send(t, "pd-streamed", "POST", "/v1/completions", completion("hello", true), 200, "")
			w.Set(fakeworker.Status(400, induced)) // the prefill worker
			r.send(t, "pd-prefill-400", "POST", "/v1/completions", body, 400, "worker_client_error")
		}},
		{name: "disaggregated concurrent", pdMode: PDSGLang, run: func(t *testing.T, r *exitRig, _ *fakeworker.Worker) {
			r.send(t, "pd-concurrent", "POST", "/v1/completions", completion("hello", true), 200, "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := startFake(t, "w1")
			var ws []Worker
			switch {
			case tc.noPool:
			case tc.pdMode != "":
				decode := startFake(t, "d1")
				ws = []Worker{{ID: 1, URL: w.URL, Role: RolePrefill}, {ID: 2, URL: decode.URL, Role: RoleDecode}}
			default:
				ws = regular(w)
			}
			r := startExitRig(t, tc.cfg, tc.pdMode, ws)
			tc.run(t, r, w)
			r.check(t)
		})
	}
}

// holding runs refused while a first request holds the one admission slot
// (its worker holds its answer), then lets the first one finish.
func holding(t *testing.T, r *exitRig, w *fakeworker.Worker, refused func()) {
	t.Helper()
	w.Set(fakeworker.Hold())
	first := make(chan struct{})
	go func() {
		defer close(first)
		r.send(t, "holder", "POST", "/v1/completions", `{"model":"m","prompt":"hold"}`, 200, "")
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the first request at the worker")
	refused()
	w.Open()
	<-first
}

// sendExpecting sends the headers of a request with Expect: 100-continue
// and no key, and reads the refusal that comes before its body.
func sendExpecting(t *testing.T, r *exitRig, id string, status int, errType string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: kvrouter\r\nContent-Type: application/json\r\n"+
		"Content-Length: 30\r\nExpect: 100-continue\r\nx-request-id: "+id+"\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("%s: %d, want %d", id, resp.StatusCode, status)
	}
	r.expect(id, status, errType)
}

// TestARouteThatAdmitsIsAnExchange: a route's requests are exchanges, with
// a plan and their end in finish (which releases the admission ticket),
// exactly when the route is metered; a route that admits must be one, or
// its tickets would never be released.
func TestARouteThatAdmitsIsAnExchange(t *testing.T) {
	for _, rt := range append(routes, noRoute) {
		metered := rt.metered != nil
		if rt.admits && !metered {
			t.Errorf("%s takes an admission ticket but is not metered", rt.name)
		}
		if metered != (rt.plan != nil) || metered == (rt.serve != nil) {
			t.Errorf("%s: metered %v, with a plan %v, with serve %v: a metered route has a plan, any other serve",
				rt.name, metered, rt.plan != nil, rt.serve != nil)
		}
	}
}
