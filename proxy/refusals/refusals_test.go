package refusals

import (
	"log/slog"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/logsink"
)

// A flood of refusals is logged at most refusalLines a second; the next
// line says how many went unlogged. Every one is counted.
func TestRefusalLinesAreRateLimited(t *testing.T) {
	var sink logsink.Sink
	r := New(metrics.NewSet(), slog.New(slog.NewJSONHandler(&sink, nil)))
	now := time.Unix(100, 0)
	r.now = func() time.Time { return now }
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/v1/models")
	for range 3 * refusalLines {
		r.Refused(&ctx, "/v1/models", 401, "unauthorized", true)
	}
	if n := len(sink.Messages(t, "refused")); n != refusalLines {
		t.Fatalf("%d lines in one second, want %d", n, refusalLines)
	}
	now = now.Add(time.Second)
	r.Refused(&ctx, "/v1/models", 401, "unauthorized", true)
	lines := sink.Messages(t, "refused")
	if last := lines[len(lines)-1]; last["unlogged"] != float64(2*refusalLines) {
		t.Fatalf("the next second's line: %v, want unlogged %d", last, 2*refusalLines)
	}
	if got := r.counter("/v1/models", "unauthorized").Get(); got != uint64(3*refusalLines+1) {
		t.Fatalf("counted %d, want every one", got)
	}
}
