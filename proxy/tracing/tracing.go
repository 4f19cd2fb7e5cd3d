package tracing

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/requestlog"
)

// propagator speaks W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Request is the request span of one exchange; nil when not tracing.
type Request struct {
	tracer trace.Tracer
	ctx    context.Context // carries span, for the attempts' spans
	span   trace.Span
}

// Start opens the request span of the request whose head is h, to the
// endpoint at path, from start (a request the door refused is traced from
// its arrival), or returns nil when tracer is nil.
func Start(tracer trace.Tracer, h *fasthttp.RequestHeader, path string, start time.Time, id []byte) *Request {
	if tracer == nil {
		return nil
	}
	parent := propagator.Extract(context.Background(), headerCarrier{h})
	ctx, span := tracer.Start(parent, path, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("http.route", path), attribute.String("kvrouter.request_id", string(id))))
	return &Request{tracer: tracer, ctx: ctx, span: span}
}

// End closes the request span with how the request ended: status and
// errType as its client saw them, the model it asked for and how it was
// routed.
func (r *Request) End(status int, errType, model string, route *requestlog.Route) {
	if r == nil {
		return
	}
	s := r.span
	s.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("gen_ai.request.model", model),
		attribute.Int("kvrouter.attempts", route.Attempts))
	if route.Decided {
		s.SetAttributes(attribute.String("kvrouter.decision", requestlog.DecisionName(route.Decision)),
			attribute.Int64("kvrouter.worker", int64(route.Worker)))
	}
	if errType != "" {
		s.SetStatus(codes.Error, errType)
	}
	s.End()
}

// Attempt opens the span of an attempt on worker w, or returns nil.
func (r *Request) Attempt(w affinity.WorkerID, phase string) trace.Span {
	if r == nil {
		return nil
	}
	_, span := r.tracer.Start(r.ctx, "attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int64("kvrouter.worker", int64(w)), attribute.String("kvrouter.phase", phase)))
	return span
}

// Inject puts span's traceparent into an upstream request.
func Inject(span trace.Span, h *fasthttp.RequestHeader) {
	if span == nil {
		return
	}
	propagator.Inject(trace.ContextWithSpan(context.Background(), span), headerCarrier{h})
}

// EndAttempt closes an attempt's span with its outcome (its name), whether
// it failed, and its status (0 when no answer came).
func EndAttempt(span trace.Span, outcome string, failed bool, status int) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("kvrouter.outcome", outcome))
	if status > 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if failed {
		span.SetStatus(codes.Error, "attempt failed")
	}
	span.End()
}

// headerCarrier lets the propagator read and write fasthttp headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
