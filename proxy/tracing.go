package proxy

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/requestlog"
)

// Tracing, when Deps.Tracer is set: an OpenTelemetry span per inference
// request (a server span, the child of the client's W3C traceparent when it
// sent one) and per upstream attempt (a client span whose traceparent goes
// to the worker), so one request can be followed through the tier into the
// engine. Without a tracer nothing of it runs.

// propagator speaks W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// requestTrace is the request span of one exchange.
type requestTrace struct {
	tracer trace.Tracer
	ctx    context.Context // carries span, for the attempts' spans
	span   trace.Span
}

// startTrace opens x's request span, from x's start (a request the door
// refused is traced from its arrival).
func (rec *recorder) startTrace(x *exchange) {
	if rec.tracer == nil {
		return
	}
	parent := propagator.Extract(context.Background(), requestCarrier{&x.ctx.Request.Header})
	ctx, span := rec.tracer.Start(parent, x.ep.Path, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.start),
		trace.WithAttributes(attribute.String("http.route", x.ep.Path), attribute.String("kvrouter.request_id", string(x.id))))
	x.trace = &requestTrace{tracer: rec.tracer, ctx: ctx, span: span}
}

// endTrace closes x's request span with how the request ended.
func (x *exchange) endTrace(status int, errType string) {
	if x.trace == nil {
		return
	}
	s := x.trace.span
	s.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("gen_ai.request.model", x.in.Model),
		attribute.Int("kvrouter.attempts", x.route.Attempts))
	if x.route.Decided {
		s.SetAttributes(attribute.String("kvrouter.decision", requestlog.DecisionName(x.route.Decision)),
			attribute.Int64("kvrouter.worker", int64(x.route.Worker)))
	}
	if errType != "" {
		s.SetStatus(codes.Error, errType)
	}
	s.End()
}

// attemptTrace opens the span of an attempt on worker w, or returns nil.
func (x *exchange) attemptTrace(w affinity.WorkerID, phase string) trace.Span {
	if x.trace == nil {
		return nil
	}
	_, span := x.trace.tracer.Start(x.trace.ctx, "attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int64("kvrouter.worker", int64(w)), attribute.String("kvrouter.phase", phase)))
	return span
}

// injectTrace puts span's traceparent into an upstream request.
func injectTrace(span trace.Span, h *fasthttp.RequestHeader) {
	if span == nil {
		return
	}
	propagator.Inject(trace.ContextWithSpan(context.Background(), span), requestCarrier{h})
}

// endAttemptTrace closes an attempt's span with its outcome and status.
func endAttemptTrace(span trace.Span, o Outcome, status int) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("kvrouter.outcome", outcomeName(o)))
	if status > 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if o == Failed {
		span.SetStatus(codes.Error, "attempt failed")
	}
	span.End()
}

func outcomeName(o Outcome) string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return "canceled"
}

// requestCarrier lets the propagator read and write fasthttp headers.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (c requestCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c requestCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c requestCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
