package main

import (
	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fastjson"
)

// job is one parsed inference request, whatever API it came in on, ready for the common path:
// the sequences it asks of the engine and the renderer of its answer. Every inference endpoint
// is an adapter that builds a job; the path from there on (the errors fault, submission, waiting,
// client-disconnect cancellation, metrics) is shared.
type job struct {
	subs    []submission // one per engine request; embeddings and rerank send several
	stream  bool         // answer with server-sent events; only for a single sequence
	render  renderer     // a streamRenderer when stream is set
	pooling bool         // embeddings and scores: the engine's one token is not a generated token
	phase   string       // P/D phase played (pdPrefill, pdDecode), "" for none
}

// buildFunc parses a request body into a job. p is lent for the call only: the job must not
// keep memory of it.
type buildFunc func(p *fastjson.Parser, body []byte) (job, error)

// renderer renders one API's non-streaming answer from the final usage of each of the job's
// sequences, in submission order.
type renderer interface {
	appendBody(dst []byte, final []sim.Usage) []byte
}

// streamRenderer also renders the API's server-sent events for a single sequence. Its methods are
// called from one goroutine, in event order, so they may keep state (a sequence number).
type streamRenderer interface {
	renderer
	// appendToken appends the events of the token numbered u.Completion (1-based); the first
	// token's events carry whatever the stream opens with.
	appendToken(dst []byte, u sim.Usage) []byte
	// appendEnd appends the events that close a complete stream.
	appendEnd(dst []byte, final sim.Usage) []byte
}

// finisher is implemented by renderers that record a completed answer (the Responses store).
// finish runs once, after every sequence is done and before the answer is rendered.
type finisher interface {
	finish(final []sim.Usage)
}

// The P/D phases a job can play, the label values of workersim_pd_requests_total.
const (
	pdPrefill = "prefill"
	pdDecode  = "decode"
)

// singleJob is the job of one generation planned by plan.
func singleJob(p servePlan, r renderer) job {
	return job{subs: []submission{p.sub}, stream: p.stream, render: r, phase: p.phase}
}
