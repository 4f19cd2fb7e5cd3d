package proxy

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// Conditions the request path branches on. Each maps to one HTTP status in
// statusOf, the single place where errors meet HTTP.
var (
	ErrBadRequest      = wire.ErrBadRequest      // a body the router cannot read, among others
	ErrForbidden       = errors.New("forbidden") // the caller's key may not do what it asked
	ErrTooLarge        = errors.New("request body too large")
	ErrModelNotFound   = errors.New("model not found")
	ErrNotFound        = errors.New("not found") // a stored response no worker holds for the caller
	ErrNoWorker        = errors.New("no eligible worker")
	ErrUpstream        = errors.New("upstream failed")
	ErrUpstreamTimeout = errors.New("upstream timed out")
	ErrTooManyRequests = errors.New("too many concurrent requests")
	ErrClientGone      = errors.New("client went away")

	// errAnswerTooLarge: a worker's non-streamed answer exceeded
	// --max-response-size; it is a 502, and not retried.
	errAnswerTooLarge = errors.New("worker answer too large")
)

// abortError is why the router gave up on a request while an attempt of it
// was under way (the prefill half of a concurrent P/D request failed).
type abortError struct{ err error }

func (e *abortError) Error() string { return e.err.Error() }
func (e *abortError) Unwrap() error { return e.err }

// isGone reports whether err means the client went away.
func isGone(err error) bool { return errors.Is(err, ErrClientGone) }

// contextCause is why x's attempts were cancelled.
func contextCause(x *exchange) error { return x.life.why() }

// errorf is an error of kind whose message, format and args, the client
// sees (wire.Errorf).
func errorf(kind error, format string, args ...any) error { return wire.Errorf(kind, format, args...) }

// statusOf maps an error to its HTTP status and OpenAI error type.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadRequest):
		return fasthttp.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, errNoKey):
		return fasthttp.StatusUnauthorized, "invalid_request_error"
	case errors.Is(err, ErrForbidden):
		return fasthttp.StatusForbidden, "permission_error"
	case errors.Is(err, errBodiesHeld):
		return fasthttp.StatusServiceUnavailable, "service_unavailable"
	case errors.Is(err, errBodyTimeout):
		return fasthttp.StatusRequestTimeout, "invalid_request_error"
	case errors.Is(err, ErrTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, ErrModelNotFound), errors.Is(err, ErrNotFound):
		return fasthttp.StatusNotFound, "invalid_request_error"
	case errors.Is(err, ErrNoWorker), errors.Is(err, affinity.ErrNoCandidates):
		return fasthttp.StatusServiceUnavailable, "service_unavailable"
	case errors.Is(err, ErrTooManyRequests):
		return fasthttp.StatusTooManyRequests, "rate_limit_error"
	case errors.Is(err, errQueueTimeout):
		return fasthttp.StatusRequestTimeout, "timeout_error"
	case errors.Is(err, ErrUpstreamTimeout):
		return fasthttp.StatusGatewayTimeout, "upstream_timeout"
	default:
		return fasthttp.StatusBadGateway, "upstream_error"
	}
}

// errorType names an error of the router's own for the metrics
// (vllm_router_request_errors_total's error_type).
func errorType(err error) string {
	var abort *abortError
	switch {
	case errors.Is(err, ErrClientGone):
		return "client_disconnected"
	case errors.Is(err, ErrBadRequest):
		return "bad_request"
	case errors.Is(err, errNoKey):
		return "unauthorized"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	case errors.Is(err, errBodiesHeld):
		return "bodies_held"
	case errors.Is(err, errBodyTimeout):
		return "body_timeout"
	case errors.Is(err, ErrTooLarge):
		return "payload_too_large"
	case errors.Is(err, ErrModelNotFound):
		return "model_not_found"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrNoWorker), errors.Is(err, affinity.ErrNoCandidates):
		return "no_eligible_worker"
	case errors.Is(err, ErrTooManyRequests):
		return "rate_limited"
	case errors.Is(err, errQueueTimeout):
		return "queue_timeout"
	case errors.Is(err, ErrUpstreamTimeout):
		return "upstream_timeout"
	case errors.As(err, &abort):
		return "aborted"
	}
	return "upstream_error"
}

// writeError answers with the router's own error: in OpenAI's shape, or in
// Anthropic's on its Messages API (wire.ErrorBody).
func writeError(ctx *fasthttp.RequestCtx, err error) {
	status, typ := statusOf(err)
	writeErrorStatus(ctx, status, typ, err.Error())
}

func writeErrorStatus(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	body := wire.ErrorBody(ctx.Path(), status, typ, msg)
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// sseErrorEvent is the event that ends a stream the router had to cut with
// err, in the shape of path's API (wire.ErrorEvent).
func sseErrorEvent(path []byte, err error) []byte {
	status, typ := statusOf(err)
	return wire.ErrorEvent(path, status, typ, err.Error())
}
