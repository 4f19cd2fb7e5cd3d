package proxy

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/logsink"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// A wrong key on /v1/models, /metrics or a path of no route is logged and
// counted, as a refused inference request is: it used to leave no trace.
func TestEveryRefusalIsLoggedAndCounted(t *testing.T) {
	w := startFake(t, "w1")
	var sink logsink.Sink
	cfg := Config{APIKeys: []string{"k1"}}
	p, err := buildProxyAll(cfg, "", affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}}, nil,
		slog.New(slog.NewJSONHandler(&sink, nil)), func(d *Deps) { d.AdminToken = adminToken("adm") })
	if err != nil {
		t.Fatal(err)
	}
	r := serveRouter(t, p)
	for _, sample := range []string{"GET /v1/models", "GET /metrics", "GET /no/such/route"} {
		if got := sendSample(t, r.url, sample, "Bearer wrong"); got != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong key: %d", sample, got)
		}
	}
	var lines []map[string]any
	testwait.Eventually(t, waitDeadline, func() bool { lines = sink.Messages(t, "refused"); return len(lines) == 3 },
		"a refusal line for each of the three")
	for i, route := range []string{"/v1/models", "/metrics", "no route"} {
		if l := lines[i]; l["route"] != route || l["status"] != 401.0 || l["reason"] != "unauthorized" || l["client"] != "127.0.0.1" {
			t.Errorf("refusal line %d: %v, want route %s, 401, unauthorized, the client's address", i, l, route)
		}
		if got := metric(t, r, `vllm_router_refusals_total{route="`+route+`",reason="unauthorized"}`); got != 1 {
			t.Errorf("vllm_router_refusals_total for %s: %v, want 1", route, got)
		}
	}
	sendSample(t, r.url, "POST /v1/completions", "Bearer wrong")
	if got := metric(t, r, `vllm_router_refusals_total{route="POST /v1/completions",reason="unauthorized"}`); got != 1 {
		t.Errorf("a refused completion: vllm_router_refusals_total %v, want 1", got)
	}
	if n := len(sink.Messages(t, "refused")); n != 3 {
		t.Errorf("%d refusal lines, want 3: a refused completion has its request line instead", n)
	}
}
