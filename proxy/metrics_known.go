package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// knownErrors are the error series made at 0 for every route when a
// replica starts: a counter that appears only with its first error hides
// that error from rate() and increase(), which need two samples, so the
// first failure of each kind on each replica would go unseen by an alert.
func knownErrors() []pathmetrics.KnownError {
	own := func(err error) pathmetrics.KnownError {
		status, _ := failure.StatusOf(err)
		return pathmetrics.KnownError{ErrType: failure.Type(err), Status: status}
	}
	return []pathmetrics.KnownError{
		own(failure.ErrBadRequest), own(failure.ErrTooLarge), own(failure.ErrModelNotFound), own(failure.ErrNoWorker), own(failure.ErrTooManyRequests),
		own(failure.ErrQueueTimeout), own(failure.ErrUpstream), own(failure.ErrUpstreamTimeout), own(&failure.Abort{Err: failure.ErrUpstream}),
		own(failure.ErrNoKey), own(failure.ErrForbidden), own(failure.ErrBodiesHeld), own(failure.ErrBodyTimeout),
		{ErrType: "client_disconnected", Status: statusClientGone},
		{ErrType: "stream_cut", Status: fasthttp.StatusOK},
		{ErrType: timedOut.errType, Status: timedOut.status},
		{ErrType: workerErrorType(fasthttp.StatusBadRequest), Status: fasthttp.StatusBadRequest},
		{ErrType: workerErrorType(fasthttp.StatusTooManyRequests), Status: fasthttp.StatusTooManyRequests},
		{ErrType: workerErrorType(fasthttp.StatusInternalServerError), Status: fasthttp.StatusInternalServerError},
	}
}
