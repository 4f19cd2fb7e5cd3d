package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// collector is a loopback OTLP/HTTP trace endpoint that keeps the span
// names it receives.
type collector struct {
	mu    sync.Mutex
	names []string
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.names = append(c.names, s.Name)
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return c, ln.Addr().String()
}

func (c *collector) spans() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.names, ",")
}

func TestSpansAreExportedByOTLPWhenAnEndpointIsSet(t *testing.T) {
	router, workersim := binaries(t)
	col, addr := startCollector(t)
	_, u := startWorkersim(t, workersim, "w0")
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	url := startRouterProcess(t, router, "--worker-urls", u, "--otlp-endpoint", addr)
	if c := complete(t, url, "traced", false); c.status != 200 {
		t.Fatalf("status %d", c.status)
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		s := col.spans()
		return strings.Contains(s, "/v1/completions") && strings.Contains(s, "attempt")
	}, "the spans at the collector")
}
