package main

import (
	"errors"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// jobRunner is the common path of every inference request once its job is built: the errors
// fault, submission to the engine, waiting for its events, the answer (streamed or whole), the
// client that goes away, and the request metrics.
type jobRunner struct {
	driver   *driver
	metrics  *workerMetrics
	faults   *faultInjector
	reply    *replier
	parsers  *fastjson.ParserPool
	stopping <-chan struct{} // closed when shutdown begins
}

// serveJob is the common path of every inference endpoint: it builds the job from the body,
// submits it and answers, streamed or whole.
func (jr *jobRunner) serveJob(ctx *fasthttp.RequestCtx, build buildFunc) {
	j, tickets, ok := jr.startJob(ctx, build)
	if ok {
		jr.answer(ctx, j, tickets)
	}
}

// startJob counts the request, builds its job, applies the errors fault and submits the job's
// sequences to the engine. On failure it has answered the client and reports false.
func (jr *jobRunner) startJob(ctx *fasthttp.RequestCtx, build buildFunc) (job, []*ticket, bool) {
	jr.metrics.requests[string(ctx.Path())].Inc()
	j, err := jr.build(ctx.PostBody(), build)
	if err == nil && jr.faults.drawError() {
		err = errInjected
	}
	var tickets []*ticket
	if err == nil {
		tickets, err = jr.driver.SubmitAll(j.subs)
	}
	if err != nil {
		jr.reply.failRequest(ctx, err)
		return job{}, nil, false
	}
	jr.countPhase(j.phase)
	return j, tickets, true
}

func (jr *jobRunner) build(body []byte, build buildFunc) (job, error) {
	parser := jr.parsers.Get()
	defer jr.parsers.Put(parser)
	return build(parser, body)
}

// answer streams a streaming job and answers any other with one body.
func (jr *jobRunner) answer(ctx *fasthttp.RequestCtx, j job, tickets []*ticket) {
	if j.stream {
		jr.stream(ctx, tickets[0], j)
		return
	}
	jr.respond(ctx, tickets, j)
}

// inferenceAPI is the inference endpoints that build a job of one request in their API's shape
// (completions, chat, SGLang's /generate, Anthropic's messages, embeddings, rerank) and hand it to
// the jobRunner; the Responses API, which also stores, is responsesAPI.
type inferenceAPI struct {
	cfg     serverConfig
	created int64 // unix seconds at start, reported as created times
	models  *modelCatalog
	planner *pdPlanner
	ids     *responseIDs
	jobs    *jobRunner
}

// handleCompletions serves POST /v1/completions (chat false) and /v1/chat/completions.
func (a *inferenceAPI) handleCompletions(chat bool) fasthttp.RequestHandler {
	build := a.completionsJob(chat)
	return func(ctx *fasthttp.RequestCtx) { a.jobs.serveJob(ctx, build) }
}

func (a *inferenceAPI) completionsJob(chat bool) buildFunc {
	return func(parser *fastjson.Parser, body []byte) (job, error) {
		req, err := a.parse(parser, body, chat)
		if err != nil {
			return job{}, err
		}
		p, err := a.planner.plan(req)
		if err != nil {
			return job{}, err
		}
		r := &completionRenderer{
			head:      responseHead{id: a.ids.next(idPrefix(chat)), created: a.created, model: req.model, chat: chat},
			maxTokens: p.sub.maxTokens, includeUsage: p.includeUsage, text: a.textGen(req),
		}
		if p.kvReply {
			r.kv = a.planner.appendKVReply
		}
		p.sub.output = a.output(req)
		return singleJob(p, r), nil
	}
}

// textGen is the generator of req's text: seeded by the request, else by --text-seed.
func (a *inferenceAPI) textGen(req inferenceRequest) *textGen {
	seeded, seed := req.seeded, req.seed
	if !seeded && a.cfg.textSeeded {
		seeded, seed = true, a.cfg.textSeed
	}
	return newTextGen(seeded, seed, req.context, a.cfg.engine.BytesPerToken)
}

// output draws req's text for the engine, from a generator of its own: the blocks the engine
// caches after the prompt hold the bytes the stream sent, so a continuation (the prompt extended
// by the text generated so far, or the chat's partial answer with continue_final_message) finds
// them cached, as it does on vLLM.
func (a *inferenceAPI) output(req inferenceRequest) func(dst []byte, n int) []byte {
	return func(dst []byte, n int) []byte { return a.textGen(req).appendTake(dst, n) }
}

func idPrefix(chat bool) string {
	if chat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

func (a *inferenceAPI) parse(parser *fastjson.Parser, body []byte, chat bool) (inferenceRequest, error) {
	req, err := parseInference(parser, body, chat)
	if err != nil {
		return req, err
	}
	req.model, err = a.models.resolveModel(req.model)
	return req, err
}

// respond waits for every sequence of the job and answers with one JSON body. A client that
// closes its connection meanwhile has the job cancelled.
func (jr *jobRunner) respond(ctx *fasthttp.RequestCtx, tickets []*ticket, j job) {
	w := watchConn(ctx.Conn())
	final, err := jr.awaitAll(tickets, w.Gone())
	if w.Stop() {
		ctx.SetConnectionClose()
	}
	if err != nil {
		jr.abandon(ctx, err, tickets...)
		return
	}
	jr.finish(j, final)
	ctx.SetContentType("application/json")
	ctx.SetBody(j.render.appendBody(nil, final))
}

// awaitAll waits for each ticket's Done and returns their final usages, in order.
func (jr *jobRunner) awaitAll(tickets []*ticket, gone <-chan struct{}) ([]sim.Usage, error) {
	final := make([]sim.Usage, len(tickets))
	var events []sim.Event
	for i, t := range tickets {
		var err error
		if events, err = jr.await(t, gone, events[:0], sim.Done); err != nil {
			return nil, err
		}
		final[i] = events[len(events)-1].Usage
	}
	return final, nil
}

// await collects the ticket's events, appending them to events, until one of the given kind
// arrives; it fails when the client goes away, the worker stops or the engine fails the ticket.
func (jr *jobRunner) await(t *ticket, gone <-chan struct{}, events []sim.Event, kind sim.EventKind) ([]sim.Event, error) {
	for {
		var err error
		n := len(events)
		events, err = t.take(events)
		for _, ev := range events[n:] {
			if ev.Kind == kind || ev.Kind == sim.Done {
				return events, nil
			}
		}
		if err != nil {
			return events, err
		}
		select {
		case <-t.ready:
		case <-gone:
			return events, errClientGone
		case <-jr.stopping:
			return events, errShuttingDown
		}
	}
}

// abandon gives up on a request that failed before its answer began: a client that went away
// gets nothing (and its request is cancelled and counted); otherwise the error is the answer.
func (jr *jobRunner) abandon(ctx *fasthttp.RequestCtx, err error, tickets ...*ticket) {
	if errors.Is(err, errClientGone) {
		jr.clientGone(tickets...)
		ctx.SetConnectionClose()
		return
	}
	for _, t := range tickets {
		jr.driver.Cancel(t)
	}
	jr.reply.failRequest(ctx, err)
}

// clientGone cancels the request of a client that went away; it counts the cancellation (once
// per request) when the engine was still working on any of its sequences.
func (jr *jobRunner) clientGone(tickets ...*ticket) {
	cancelled := false
	for _, t := range tickets {
		if jr.driver.Cancel(t) {
			cancelled = true
		}
	}
	if cancelled {
		jr.metrics.cancelled.Inc()
	}
}

// finish counts a job whose sequences all completed and lets its renderer record it.
func (jr *jobRunner) finish(j job, final []sim.Usage) {
	for _, u := range final {
		if j.pooling {
			u.Completion = 0
		}
		jr.countDone(u)
	}
	if f, ok := j.render.(finisher); ok {
		f.finish(final)
	}
}

func (jr *jobRunner) countDone(u sim.Usage) {
	jr.metrics.success.Inc()
	jr.metrics.promptTokens.Add(u.Prompt)
}

func (jr *jobRunner) countPhase(phase string) {
	switch phase {
	case pdPrefill:
		jr.metrics.pdPrefill.Inc()
	case pdDecode:
		jr.metrics.pdDecode.Inc()
	}
}
