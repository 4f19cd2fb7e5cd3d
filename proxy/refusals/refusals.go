package refusals

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// refusalLines bounds the refusal lines logged a second.
const refusalLines = 20

// Routes of refusals that no route of the table names.
const (
	BeforeRouting = "(before routing)" // fasthttp refused the request's head or body
	Connection    = "(connection)"     // a connection past --max-connections
)

// Log counts and logs refusals.
type Log struct {
	set *metrics.Set
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	counters map[refusalKey]*metrics.Counter
	second   time.Time // the second whose lines are being counted
	lines    int       // lines logged in it
	unlogged int       // refusals not logged since the last line
}

type refusalKey struct{ route, reason string }

// New is the refusals of a replica, counted in set and logged to log.
func New(set *metrics.Set, log *slog.Logger) *Log {
	return &Log{set: set, log: log, now: time.Now, counters: map[refusalKey]*metrics.Counter{}}
}

// Refused records a refusal of ctx's request on route (a name of the
// route table), answered with status for reason (an error type); logged
// says whether a line of its own is due (an exchange has its own).
func (r *Log) Refused(ctx *fasthttp.RequestCtx, route string, status int, reason string, logged bool) {
	r.counter(route, reason).Inc()
	if !logged {
		return
	}
	unlogged, ok := r.mayLog()
	if !ok {
		return
	}
	attrs := []any{"route", route, "method", string(ctx.Method()), "path", clip(ctx.Path(), 128), "status", status,
		"reason", reason, "client", ctx.RemoteIP().String()}
	if unlogged > 0 {
		attrs = append(attrs, "unlogged", unlogged)
	}
	r.log.Info("refused", attrs...)
}

// counter is the series of route and reason, made on first use: both come
// from closed sets (the route table, the error types).
func (r *Log) counter(route, reason string) *metrics.Counter {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refusalKey{route, reason}
	c := r.counters[k]
	if c == nil {
		c = r.set.NewCounter(fmt.Sprintf(`vllm_router_refusals_total{route=%q,reason=%q}`, route, reason))
		r.counters[k] = c
	}
	return c
}

// mayLog reports whether a line may be logged now, and how many refusals
// went unlogged before it.
func (r *Log) mayLog() (unlogged int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now().Truncate(time.Second); !now.Equal(r.second) {
		r.second, r.lines = now, 0
	}
	if r.lines >= refusalLines {
		r.unlogged++
		return 0, false
	}
	r.lines++
	unlogged, r.unlogged = r.unlogged, 0
	return unlogged, true
}

// clip is b as a string, cut to n bytes.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
