package refusals

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// A flood of refusals is logged at most refusalLines a second; the next
// line says how many went unlogged. Every one is counted.
func TestRefusalLinesAreRateLimited(t *testing.T) {
	var sink syncBuffer
	r := New(metrics.NewSet(), slog.New(slog.NewJSONHandler(&sink, nil)))
	now := time.Unix(100, 0)
	r.now = func() time.Time { return now }
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/v1/models")
	for range 3 * refusalLines {
		r.Refused(&ctx, "/v1/models", 401, "unauthorized", true)
	}
	if n := len(sink.messages(t, "refused")); n != refusalLines {
		t.Fatalf("%d lines in one second, want %d", n, refusalLines)
	}
	now = now.Add(time.Second)
	r.Refused(&ctx, "/v1/models", 401, "unauthorized", true)
	lines := sink.messages(t, "refused")
	if last := lines[len(lines)-1]; last["unlogged"] != float64(2*refusalLines) {
		t.Fatalf("the next second's line: %v, want unlogged %d", last, 2*refusalLines)
	}
	if got := r.counter("/v1/models", "unauthorized").Get(); got != uint64(3*refusalLines+1) {
		t.Fatalf("counted %d, want every one", got)
	}
}

// syncBuffer is a log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// messages are the JSON lines logged with msg.
func (s *syncBuffer) messages(t *testing.T, msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
