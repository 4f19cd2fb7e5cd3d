package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestEachRequestAndAttemptHasASpanAndWorkersGetTheTraceparent: a request
// retried once is one server span, the child of the client's traceparent,
// with two attempt spans under it, and each worker got its attempt's.
func TestEachRequestAndAttemptHasASpanAndWorkersGetTheTraceparent(t *testing.T) {
	bad, good := startFake(t, "bad"), startFake(t, "good")
	bad.Set(fakeworker.Status(503, induced))
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer provider.Shutdown(context.Background())
	ws := []Worker{{ID: 1, URL: bad.URL, Role: RoleRegular}, {ID: 2, URL: good.URL, Role: RoleRegular}}
	p, err := buildProxyWith(Config{Retry: Retry{InitialBackoff: time.Millisecond}}, affinity.PolicyCacheAware, ws,
		func(d *Deps) { d.Tracer = provider.Tracer("kvrouter") })
	if err != nil {
		t.Fatal(err)
	}
	url := serveProxy(t, p)

	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(completion("x", false)))
	req.Header.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var spans tracetest.SpanStubs
	testwait.Eventually(t, waitDeadline, func() bool { spans = exporter.GetSpans(); return len(spans) == 3 }, "three spans")
	var server tracetest.SpanStub
	var attempts []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			server = s
		} else {
			attempts = append(attempts, s)
		}
	}
	if server.SpanContext.TraceID().String() != clientTrace || server.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("the request span is not the client's child: %v", server.SpanContext)
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans", len(attempts))
	}
	for i, w := range []*fakeworker.Worker{bad, good} {
		a := attempts[i]
		if a.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Fatalf("attempt %d is not the request span's child", i)
		}
		want := "00-" + clientTrace + "-" + a.SpanContext.SpanID().String() + "-01"
		if got := w.LastHeader().Get("traceparent"); got != want {
			t.Fatalf("%s got traceparent %q, want %q", w.Name, got, want)
		}
	}
}
