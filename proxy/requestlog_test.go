package proxy

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/logsink"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func TestEveryRequestHasOneLogLine(t *testing.T) {
	bad, good := startFake(t, "bad"), startFake(t, "good")
	bad.Set(fakeworker.Sequence(fakeworker.Status(503, induced), fakeworker.Stream(3)))
	good.Set(fakeworker.Stream(3))
	var sink logsink.Sink
	ws := []Worker{{ID: 1, URL: bad.URL, Role: RoleRegular}, {ID: 2, URL: good.URL, Role: RoleRegular}}
	p, err := buildProxyLogged(Config{Retry: Retry{InitialBackoff: time.Millisecond}}, "", affinity.PolicyCacheAware, ws, nil,
		slog.New(slog.NewJSONHandler(&sink, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	defer func() { _ = p.Shutdown(context.Background()); <-done }()
	url := "http://" + ln.Addr().String()
	prompt := strings.Repeat("a long shared system prompt. ", 20)
	readStream(t, url, completion(prompt, true))
	readStream(t, url, completion(prompt+"and a follow-up", true))
	post(t, url, "/v1/completions", `{"prompt":"no model"}`)
	var lines []map[string]any
	testwait.Eventually(t, waitDeadline, func() bool { lines = sink.Messages(t, "request"); return len(lines) == 3 }, "three request lines")
	first, second, refused := lines[0], lines[1], lines[2]
	if first["attempts"] != 2.0 || first["worker"] != 2.0 || first["decision"] != "miss" || first["status"] != 200.0 ||
		first["tokens"] != 3.0 || first["ttft_ms"] == nil || first["request_id"] == "" || first["model"] != "m" {
		t.Fatalf("first line %v", first)
	}
	if second["decision"] != "hit" || second["attempts"] != 1.0 || second["matched"].(float64) < 0.9 {
		t.Fatalf("second line %v", second)
	}
	if refused["status"] != 400.0 || refused["error_type"] != "bad_request" || refused["attempts"] != 0.0 {
		t.Fatalf("refused line %v", refused)
	}
}
