package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// recorder writes down every exchange as its client saw it, once, from
// finish: the request-path metrics, the request log's line (requestlog.go),
// the worker's tally and the trace (tracing.go). It also names the
// request (its id) and opens its span when the exchange starts. Safe for
// concurrent use.
type recorder struct {
	metrics   *Metrics
	log       *slog.Logger
	tracer    trace.Tracer // nil traces nothing
	idHeaders []string     // Config.RequestIDHeaders
}

// record writes down how x ended: status and errType as the client saw
// them.
func (rec *recorder) record(x *exchange, status int, errType string) {
	m := rec.metrics
	m.request(x.ep, status, errType, x.start)
	rec.logRequest(x, status, errType)
	countTokens(x)
	x.endTrace(status, errType)
	if !x.routed.IsZero() {
		m.routing.Update(x.routed.Sub(x.start).Seconds())
	}
	if !x.firstByte.IsZero() {
		m.ttft.Update(x.firstByte.Sub(x.start).Seconds())
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
