// Package tracing is the request path's OpenTelemetry spans, when the
// replica has a tracer: a span per inference request (a server span, the
// child of the client's W3C traceparent when it sent one) and per upstream
// attempt (a client span whose traceparent goes to the worker), so one
// request can be followed through the tier into the engine. Without a
// tracer nothing of it runs: Start returns nil, and every method of a nil
// Request does nothing.
//
// The proxy's exchange opens and closes its spans; this package knows
// nothing of it but the request log's Route, whose decision the request
// span carries.
package tracing
