package proxy

import (
	"github.com/kvrouter/kvrouter/proxy/wire"
	"github.com/valyala/fasthttp"
)

// knownError is one error_type of vllm_router_request_errors_total with
// the status a client gets with it (the usual one for a worker's own
// answer passed on).
type knownError struct {
	errType string
	status  int
}

// knownErrors are the error series made at 0 for every route when a
// replica starts: a counter that appears only with its first error hides
// that error from rate() and increase(), which need two samples, so the
// first failure of each kind on each replica would go unseen by an alert.
func knownErrors() []knownError {
	own := func(err error) knownError {
		status, _ := statusOf(err)
		return knownError{errorType(err), status}
	}
	return []knownError{
		own(ErrBadRequest), own(ErrTooLarge), own(ErrModelNotFound), own(ErrNoWorker), own(ErrTooManyRequests),
		own(errQueueTimeout), own(ErrUpstream), own(ErrUpstreamTimeout), own(&abortError{ErrUpstream}),
		own(errUnauthorized), own(ErrForbidden), own(errBodiesHeld), own(errBodyTimeout),
		{"client_disconnected", statusClientGone},
		{"stream_cut", fasthttp.StatusOK},
		{timedOut.errType, timedOut.status},
		{workerErrorType(fasthttp.StatusBadRequest), fasthttp.StatusBadRequest},
		{workerErrorType(fasthttp.StatusTooManyRequests), fasthttp.StatusTooManyRequests},
		{workerErrorType(fasthttp.StatusInternalServerError), fasthttp.StatusInternalServerError},
	}
}

// preinitErrors makes the known error series of every route, at 0.
func (m *Metrics) preinitErrors() {
	for _, ep := range wire.Endpoints {
		for _, k := range knownErrors() {
			m.errorCounter(ep, k.status, k.errType)
		}
	}
}
