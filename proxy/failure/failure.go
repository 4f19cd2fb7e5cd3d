package failure

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// Conditions the request path branches on. Each maps to one HTTP status in
// StatusOf, the single place where errors meet HTTP.
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

	// ErrAnswerTooLarge: a worker's non-streamed answer exceeded
	// --max-response-size; it is a 502, and not retried.
	ErrAnswerTooLarge = errors.New("worker answer too large")

	// ErrNoKey: a request without the credential its route needs.
	ErrNoKey = errors.New("unauthorized")
	// ErrBodiesHeld: the budget of request bodies is spent.
	ErrBodiesHeld = errors.New("too many request bytes held")
	// ErrBodyTimeout: the body did not arrive within --body-read-timeout-secs,
	// or fell behind --min-body-rate.
	ErrBodyTimeout = errors.New("request body timed out")
	// ErrQueueTimeout: a request waited --queue-timeout-secs in the admission
	// queue.
	ErrQueueTimeout = errors.New("timed out in the admission queue")
)

// Abort is why the router gave up on a request while an attempt of it
// was under way (the prefill half of a concurrent P/D request failed).
type Abort struct{ Err error }

func (e *Abort) Error() string { return e.Err.Error() }
func (e *Abort) Unwrap() error { return e.Err }

// IsGone reports whether err means the client went away.
func IsGone(err error) bool { return errors.Is(err, ErrClientGone) }

// Errorf is an error of kind whose message, format and args, the client
// sees (wire.Errorf).
func Errorf(kind error, format string, args ...any) error { return wire.Errorf(kind, format, args...) }

// StatusOf maps an error to its HTTP status and OpenAI error type.
func StatusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadRequest):
		return fasthttp.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, ErrNoKey):
		return fasthttp.StatusUnauthorized, "invalid_request_error"
	case errors.Is(err, ErrForbidden):
		return fasthttp.StatusForbidden, "permission_error"
	case errors.Is(err, ErrBodiesHeld):
		return fasthttp.StatusServiceUnavailable, "service_unavailable"
	case errors.Is(err, ErrBodyTimeout):
		return fasthttp.StatusRequestTimeout, "invalid_request_error"
	case errors.Is(err, ErrTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, ErrModelNotFound), errors.Is(err, ErrNotFound):
		return fasthttp.StatusNotFound, "invalid_request_error"
	case errors.Is(err, ErrNoWorker), errors.Is(err, affinity.ErrNoCandidates):
		return fasthttp.StatusServiceUnavailable, "service_unavailable"
	case errors.Is(err, ErrTooManyRequests):
		return fasthttp.StatusTooManyRequests, "rate_limit_error"
	case errors.Is(err, ErrQueueTimeout):
		return fasthttp.StatusRequestTimeout, "timeout_error"
	case errors.Is(err, ErrUpstreamTimeout):
		return fasthttp.StatusGatewayTimeout, "upstream_timeout"
	default:
		return fasthttp.StatusBadGateway, "upstream_error"
	}
}

// Type names an error of the router's own for the metrics
// (vllm_router_request_errors_total's error_type).
func Type(err error) string {
	var abort *Abort
	switch {
	case errors.Is(err, ErrClientGone):
		return "client_disconnected"
	case errors.Is(err, ErrBadRequest):
		return "bad_request"
	case errors.Is(err, ErrNoKey):
		return "unauthorized"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	case errors.Is(err, ErrBodiesHeld):
		return "bodies_held"
	case errors.Is(err, ErrBodyTimeout):
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
	case errors.Is(err, ErrQueueTimeout):
		return "queue_timeout"
	case errors.Is(err, ErrUpstreamTimeout):
		return "upstream_timeout"
	case errors.As(err, &abort):
		return "aborted"
	}
	return "upstream_error"
}

// Write answers with the router's own error: in OpenAI's shape, or in
// Anthropic's on its Messages API (wire.ErrorBody).
func Write(ctx *fasthttp.RequestCtx, err error) {
	status, typ := StatusOf(err)
	WriteStatus(ctx, status, typ, err.Error())
}

// WriteStatus answers with status and an error body of type typ and
// message msg, in the shape of the request's API.
func WriteStatus(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	body := wire.ErrorBody(ctx.Path(), status, typ, msg)
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// SSEEvent is the event that ends a stream the router had to cut with
// err, in the shape of path's API (wire.ErrorEvent).
func SSEEvent(path []byte, err error) []byte {
	status, typ := StatusOf(err)
	return wire.ErrorEvent(path, status, typ, err.Error())
}
