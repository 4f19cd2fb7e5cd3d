package main

import (
	"strconv"
	"time"
)

// Error kinds of a failed request, the keys of the report's errors_by_kind. Statuses add
// "status_<code>" (bounded: codes are three digits).
const (
	kindTransport   = "transport"    // connect, write or read failure
	kindTimeout     = "timeout"      // --request-timeout elapsed
	kindStreamCut   = "stream_cut"   // the stream ended before [DONE]
	kindStreamError = "stream_error" // an error object inside the stream
	kindBadUsage    = "bad_usage"    // a usage chunk that could not be read
)

// statusKind is the error kind of a non-2xx response.
func statusKind(code int) string { return "status_" + strconv.Itoa(code) }

// result is the outcome of one request.
type result struct {
	// dispatched is when the request was started, from the start of the run; lag is how late
	// that was against its schedule (replay only).
	dispatched, lag time.Duration
	ttft            time.Duration // until the first data event; 0 if none arrived
	latency         time.Duration // until the end of the response
	status          int           // HTTP status; 0 if none arrived
	worker          string        // x-worker-id of the response; empty if none
	requestID       string        // x-request-id of the response: the router's log line of it
	target          int           // index of the target that answered, or that failed last
	// errKind is empty for a success, else the error kind; err says more.
	errKind string
	err     error
	// cancelled: the run stopped (Ctrl-C, --duration) before the request finished. Such a
	// request is neither a success nor an error: it is left out of the figures.
	cancelled bool
	events    int    // data events other than [DONE]
	usage     *usage // nil when the server sent none
	id        int    // replay: index of the record in time order; agentic: session number
	model     string // the request's "model"
	turn      int    // agentic turn index; -1 for replay
}

// ok reports whether the request succeeded.
func (r *result) ok() bool { return !r.cancelled && r.errKind == "" }
