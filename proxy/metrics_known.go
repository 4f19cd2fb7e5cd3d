package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// knownErrors are the error series made at 0 for every route when a
// replica starts: a counter that appears only with its first error hides
// that error from rate() and increase(), which need two samples, so the
// first failure of each kind on each replica would go unseen by an alert.
func knownErrors() []pathmetrics.KnownError {
	own := func(err error) pathmetrics.KnownError {
		status, _ := statusOf(err)
		return pathmetrics.KnownError{ErrType: errorType(err), Status: status}
	}
	return []pathmetrics.KnownError{
		own(ErrBadRequest), own(ErrTooLarge), own(ErrModelNotFound), own(ErrNoWorker), own(ErrTooManyRequests),
		own(errQueueTimeout), own(ErrUpstream), own(ErrUpstreamTimeout), own(&abortError{ErrUpstream}),
		own(errUnauthorized), own(ErrForbidden), own(errBodiesHeld), own(errBodyTimeout),
		{ErrType: "client_disconnected", Status: statusClientGone},
		{ErrType: "stream_cut", Status: fasthttp.StatusOK},
		{ErrType: timedOut.errType, Status: timedOut.status},
		{ErrType: workerErrorType(fasthttp.StatusBadRequest), Status: fasthttp.StatusBadRequest},
		{ErrType: workerErrorType(fasthttp.StatusTooManyRequests), Status: fasthttp.StatusTooManyRequests},
		{ErrType: workerErrorType(fasthttp.StatusInternalServerError), Status: fasthttp.StatusInternalServerError},
	}
}
