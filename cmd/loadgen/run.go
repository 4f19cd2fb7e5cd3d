package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// Run modes, the report's "mode".
const (
	modeReplay  = "replay"
	modeAgentic = "agentic"
)

// errDurationReached is the cancellation cause of a run that reached --duration.
var errDurationReached = errors.New("--duration reached")

// run is one load-generating run: where requests go, the clock they are timed by, where the
// results gather, and the bound on its length. Its drivers (replay, agentic) return only once
// every request they started has finished or been cancelled, so a run leaves no goroutine behind.
type run struct {
	client   *client
	clock    Clock
	results  *collector
	model    string        // "model" of every request; empty leaves it out
	mix      *modelMix     // when set, each agentic session's model instead
	duration time.Duration // the run stops, cancelling what is in flight, after this long
	progress io.Writer     // where the progress line goes; nil for none
	// ticks starts the progress ticker: a channel and its stop function.
	ticks func() (<-chan time.Time, func())
	// onResult, when set, sees every result as it is recorded, from the request's goroutine.
	onResult func(result)
}

// realTicks ticks the progress line on the wall clock.
func realTicks() (<-chan time.Time, func()) {
	ticker := time.NewTicker(progressInterval)
	return ticker.C, ticker.Stop
}

// execute runs drive under the --duration cap, with the progress line, and reports. drive
// receives the run's context (cancelled by the cap or by ctx) and the start time.
func (r *run) execute(ctx context.Context, mode string, drive func(context.Context, time.Time)) report {
	start := r.clock.Now()
	ctx, cancel := withClockTimeout(ctx, r.clock, r.duration, errDurationReached)
	defer cancel()
	ticks, stopTicks := r.ticks()
	stopProgress := startProgress(r.progress, ticks, r.results, r.clock, start)
	drive(ctx, start)
	stopProgress()
	stopTicks()
	elapsed := min(r.clock.Now().Sub(start), r.duration)
	r.client.close()
	return r.results.report(mode, r.client.urls, r.client.failovers.Load(), elapsed)
}

// send performs one started request and records its outcome; the rest of res (id, turn,
// dispatch time and lag) is the caller's.
func (r *run) send(ctx context.Context, req workload.Request, header http.Header, res result) {
	out := r.client.do(ctx, req, header)
	out.id, out.turn, out.dispatched, out.lag, out.model = res.id, res.turn, res.dispatched, res.lag, req.Model
	r.results.add(out)
	if r.onResult != nil {
		r.onResult(out)
	}
}
