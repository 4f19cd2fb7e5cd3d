package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// Every error the router names for the metrics is one of the series made
// at start: a new kind must be added to knownErrors, or its first
// occurrence would be invisible to rate().
func TestEveryOwnErrorTypeIsKnownUpFront(t *testing.T) {
	var known []string
	for _, k := range knownErrors() {
		known = append(known, k.ErrType)
	}
	for _, err := range []error{failure.ErrBadRequest, failure.ErrTooLarge, failure.ErrModelNotFound, failure.ErrNoWorker, affinity.ErrNoCandidates,
		failure.ErrUpstream, failure.ErrUpstreamTimeout, failure.ErrTooManyRequests, failure.ErrClientGone, failure.ErrQueueTimeout, failure.ErrAnswerTooLarge,
		&failure.Abort{Err: failure.ErrUpstream}, failure.ErrForbidden} {
		if typ := failure.Type(err); !slices.Contains(known, typ) {
			t.Errorf("%v is counted as %q, which is not made at start", err, typ)
		}
	}
	if !slices.Contains(known, timedOut.errType) {
		t.Errorf("a stream cut at the request's deadline is counted as %q, which is not made at start", timedOut.errType)
	}
	for _, status := range []int{400, 404, 429, 500, 503} {
		if typ := workerErrorType(status); !slices.Contains(known, typ) {
			t.Errorf("a worker's %d is counted as %q, which is not made at start", status, typ)
		}
	}
}

// Before any request, /metrics already has every route's error series at
// 0; the first error then moves one of them from 0 to 1 instead of
// creating it.
func TestErrorCountersStartAtZeroOnEveryRoute(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	_, body := get(t, r.url+"/metrics")
	for _, ep := range wire.Endpoints {
		for _, k := range knownErrors() {
			series := fmt.Sprintf(`vllm_router_request_errors_total{route=%q,status="%d",error_type=%q} 0`, ep.Path, k.Status, k.ErrType)
			if !strings.Contains(body, series+"\n") {
				t.Fatalf("no %s before the first request", series)
			}
		}
	}
	post(t, r.url, "/v1/completions", `{"model":`)
	_, body = get(t, r.url+"/metrics")
	if want := `vllm_router_request_errors_total{route="/v1/completions",status="400",error_type="bad_request"} 1`; !strings.Contains(body, want+"\n") {
		t.Fatalf("a malformed body did not count on its pre-made series: no %s", want)
	}
}
