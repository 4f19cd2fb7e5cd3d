package main

import (
	"errors"
	"net/http"

	"github.com/kvrouter/kvrouter/internal/anthropicapi"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

var (
	// errModelNotFound: the request names a model the worker does not serve (404).
	errModelNotFound = errors.New("model not found")
	// errInjected: the errors fault chose to fail this request (500).
	errInjected = errors.New("injected fault: simulated engine error")
	// errShuttingDown: the worker is stopping (503).
	errShuttingDown = errors.New("worker is shutting down")
	// errResponseNotFound: a response id this worker does not hold (404).
	errResponseNotFound = errors.New("response not found")
	// errCacheBusy: the prefix cache cannot be reset while requests hold its blocks (409).
	errCacheBusy = errors.New("prefix cache not reset: requests are running or waiting")
	// errUnhealthy: /health_generate's token did not come (503).
	errUnhealthy = errors.New("health check generation failed")
)

// apiError is how an error is shown to a client.
type apiError struct {
	status int
	typ    string
	code   string
	reason string // label of workersim_requests_failed_total, empty when not counted
}

// classify maps an error to its HTTP status and OpenAI error fields; the one place that does.
func classify(err error) apiError {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, sim.ErrRequestTooLarge), errors.Is(err, errBadFault):
		return apiError{http.StatusBadRequest, "invalid_request_error", "invalid_request", failBadRequest}
	case errors.Is(err, errModelNotFound):
		return apiError{http.StatusNotFound, "invalid_request_error", "model_not_found", failModelNotFound}
	case errors.Is(err, errInjected):
		return apiError{http.StatusInternalServerError, "internal_server_error", "injected_fault", failInjected}
	case errors.Is(err, errShuttingDown), errors.Is(err, errDriverStopped):
		return apiError{http.StatusServiceUnavailable, "service_unavailable", "shutting_down", failShutdown}
	case errors.Is(err, errResponseNotFound):
		return apiError{http.StatusNotFound, "invalid_request_error", "response_not_found", failResponseNotFound}
	case errors.Is(err, errCacheBusy):
		return apiError{http.StatusConflict, "invalid_request_error", "cache_busy", ""}
	case errors.Is(err, errUnhealthy):
		return apiError{http.StatusServiceUnavailable, "service_unavailable", "unhealthy", ""}
	}
	return apiError{http.StatusInternalServerError, "internal_server_error", "internal_error", ""}
}

// replier writes what every answer of the worker shares: its id header, and an error as an error
// body in the shape of the request's API, counted when it fails an inference request.
type replier struct {
	workerID string
	metrics  *workerMetrics
}

func (r *replier) setCommonHeaders(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(headerWorkerID, r.workerID)
}

// failRequest answers an inference request with err and counts the failure.
func (r *replier) failRequest(ctx *fasthttp.RequestCtx, err error) {
	if reason := classify(err).reason; reason != "" {
		r.metrics.fail(reason)
	}
	r.writeError(ctx, err)
}

// writeError answers with err as an error body in the shape of the request's API.
func (r *replier) writeError(ctx *fasthttp.RequestCtx, err error) {
	e := classify(err)
	ctx.Response.Reset()
	r.setCommonHeaders(ctx)
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(errorBody(ctx.Path(), err.Error(), e))
}

// errorBody is an error in the shape of path's API: Anthropic's on its Messages API (and any
// path under it), OpenAI's elsewhere.
func errorBody(path []byte, message string, e apiError) []byte {
	if anthropicapi.Serves(path) {
		return anthropicapi.AppendError(nil, e.status, message)
	}
	return appendErrorBody(nil, message, e.typ, e.code)
}
