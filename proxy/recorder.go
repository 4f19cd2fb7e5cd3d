package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
	"github.com/kvrouter/kvrouter/proxy/requestlog"
)

// recorder writes down every exchange as its client saw it, once, from
// finish: the request-path metrics, the request log's line (package
// requestlog), the worker's tally and the trace (package tracing). It also
// names the request (its id) and holds the tracer its span is opened with
// when the exchange starts. Safe for concurrent use.
type recorder struct {
	metrics   *pathmetrics.Metrics
	log       *slog.Logger
	tracer    trace.Tracer // nil traces nothing
	idHeaders []string     // Config.RequestIDHeaders
}

// record writes down how x ended: status and errType as the client saw
// them.
func (rec *recorder) record(x *exchange, status int, errType string) {
	m := rec.metrics
	m.Request(x.ep, status, errType, x.start)
	requestlog.Write(rec.log, &requestlog.Entry{ID: x.id, Path: x.ep.Path, Model: x.in.Model, Status: status,
		ErrType: errType, Start: x.start, Routed: x.routed, FirstByte: x.firstByte, Route: &x.route})
	countTokens(x)
	x.trace.End(status, errType, x.in.Model, &x.route)
	if !x.routed.IsZero() {
		m.Routing.Update(x.routed.Sub(x.start).Seconds())
	}
	if !x.firstByte.IsZero() {
		m.TTFT.Update(x.firstByte.Sub(x.start).Seconds())
	}
}

// requestID appends to buf the client's request id, or a new one: 96
// random bits in hex, unique in practice (they need not be unguessable).
func (rec *recorder) requestID(ctx *fasthttp.RequestCtx, buf []byte) []byte {
	for _, h := range rec.idHeaders {
		if v := ctx.Request.Header.Peek(h); len(v) > 0 {
			return append(buf, v...)
		}
	}
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return hex.AppendEncode(buf, b[:])
}

// noteAttempt records, for the request log and the worker's tally, an
// attempt of leg l on dec's worker, whose counters are c.
func (x *exchange) noteAttempt(l *leg, dec affinity.Decision, c *pathmetrics.WorkerCounters) {
	x.route.Attempts++
	if l.phase == RolePrefill {
		x.route.Prefill = dec.Worker
		return
	}
	if !x.route.Decided && !l.pinned {
		x.route.Decision, x.route.Decided = dec, true
		x.route.Fact, x.route.Via, x.route.Judged = l.decided.Fact, l.decided.Via, l.decided.Routed()
	}
	x.route.Worker, x.counters = dec.Worker, c
}
