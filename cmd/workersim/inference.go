package main

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// serveJob is the common path of every inference endpoint: it builds the job from the body,
// submits it and answers, streamed or whole.
func (s *server) serveJob(ctx *fasthttp.RequestCtx, build buildFunc) {
	j, tickets, ok := s.startJob(ctx, build)
	if ok {
		s.answer(ctx, j, tickets)
	}
}

// startJob counts the request, builds its job, applies the errors fault and submits the job's
// sequences to the engine. On failure it has answered the client and reports false.
func (s *server) startJob(ctx *fasthttp.RequestCtx, build buildFunc) (job, []*ticket, bool) {
	s.metrics.requests[string(ctx.Path())].Inc()
	j, err := s.build(ctx.PostBody(), build)
	if err == nil && s.drawError() {
		err = errInjected
	}
	var tickets []*ticket
	if err == nil {
		tickets, err = s.driver.SubmitAll(j.subs)
	}
	if err != nil {
		s.failRequest(ctx, err)
		return job{}, nil, false
	}
	s.countPhase(j.phase)
	return j, tickets, true
}

func (s *server) build(body []byte, build buildFunc) (job, error) {
	parser := s.parsers.Get()
	defer s.parsers.Put(parser)
	return build(parser, body)
}

// answer streams a streaming job and answers any other with one body.
func (s *server) answer(ctx *fasthttp.RequestCtx, j job, tickets []*ticket) {
	if j.stream {
		s.stream(ctx, tickets[0], j)
		return
	}
	s.respond(ctx, tickets, j)
}

// handleCompletions serves POST /v1/completions (chat false) and /v1/chat/completions.
func (s *server) handleCompletions(chat bool) fasthttp.RequestHandler {
	build := s.completionsJob(chat)
	return func(ctx *fasthttp.RequestCtx) { s.serveJob(ctx, build) }
}

func (s *server) completionsJob(chat bool) buildFunc {
	return func(parser *fastjson.Parser, body []byte) (job, error) {
		req, err := s.parse(parser, body, chat)
		if err != nil {
			return job{}, err
		}
		p, err := s.plan(req)
		if err != nil {
			return job{}, err
		}
		r := &completionRenderer{
			head:      responseHead{id: s.nextID(idPrefix(chat)), created: s.created, model: req.model, chat: chat},
			maxTokens: p.sub.maxTokens, includeUsage: p.includeUsage, text: s.textGen(req),
		}
		if p.kvReply {
			r.kv = s.appendKVReply
		}
		return singleJob(p, r), nil
	}
}

// textGen is the generator of req's text: seeded by the request, else by --text-seed.
func (s *server) textGen(req inferenceRequest) *textGen {
	seeded, seed := req.seeded, req.seed
	if !seeded && s.cfg.textSeeded {
		seeded, seed = true, s.cfg.textSeed
	}
	return newTextGen(seeded, seed, req.context, s.cfg.engine.BytesPerToken)
}

func idPrefix(chat bool) string {
	if chat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

func (s *server) parse(parser *fastjson.Parser, body []byte, chat bool) (inferenceRequest, error) {
	req, err := parseInference(parser, body, chat)
	if err != nil {
		return req, err
	}
	req.model, err = s.resolveModel(req.model)
	return req, err
}

// resolveModel checks that the worker serves model and names the default (its first model) when
// the request names none.
func (s *server) resolveModel(model string) (string, error) {
	switch {
	case model == "":
		return s.cfg.models[0], nil
	case !s.cfg.serves(model) && !s.adapters.has(model):
		return "", fmt.Errorf("%w: the model %q does not exist", errModelNotFound, model)
	}
	return model, nil
}

// respond waits for every sequence of the job and answers with one JSON body. A client that
// closes its connection meanwhile has the job cancelled.
func (s *server) respond(ctx *fasthttp.RequestCtx, tickets []*ticket, j job) {
	w := watchConn(ctx.Conn())
	final, err := s.awaitAll(tickets, w.Gone())
	if w.Stop() {
		ctx.SetConnectionClose()
	}
	if err != nil {
		s.abandon(ctx, err, tickets...)
		return
	}
	s.finish(j, final)
	ctx.SetContentType("application/json")
	ctx.SetBody(j.render.appendBody(nil, final))
}

// awaitAll waits for each ticket's Done and returns their final usages, in order.
func (s *server) awaitAll(tickets []*ticket, gone <-chan struct{}) ([]sim.Usage, error) {
	final := make([]sim.Usage, len(tickets))
	var events []sim.Event
	for i, t := range tickets {
		var err error
		if events, err = s.await(t, gone, events[:0], sim.Done); err != nil {
			return nil, err
		}
		final[i] = events[len(events)-1].Usage
	}
	return final, nil
}

// await collects the ticket's events, appending them to events, until one of the given kind
// arrives; it fails when the client goes away, the worker stops or the engine fails the ticket.
func (s *server) await(t *ticket, gone <-chan struct{}, events []sim.Event, kind sim.EventKind) ([]sim.Event, error) {
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
		case <-s.stopping:
			return events, errShuttingDown
		}
	}
}

// abandon gives up on a request that failed before its answer began: a client that went away
// gets nothing (and its request is cancelled and counted); otherwise the error is the answer.
func (s *server) abandon(ctx *fasthttp.RequestCtx, err error, tickets ...*ticket) {
	if errors.Is(err, errClientGone) {
		s.clientGone(tickets...)
		ctx.SetConnectionClose()
		return
	}
	for _, t := range tickets {
		s.driver.Cancel(t)
	}
	s.failRequest(ctx, err)
}

// clientGone cancels the request of a client that went away; it counts the cancellation (once
// per request) when the engine was still working on any of its sequences.
func (s *server) clientGone(tickets ...*ticket) {
	cancelled := false
	for _, t := range tickets {
		if s.driver.Cancel(t) {
			cancelled = true
		}
	}
	if cancelled {
		s.metrics.cancelled.Inc()
	}
}

// finish counts a job whose sequences all completed and lets its renderer record it.
func (s *server) finish(j job, final []sim.Usage) {
	for _, u := range final {
		if j.pooling {
			u.Completion = 0
		}
		s.countDone(u)
	}
	if f, ok := j.render.(finisher); ok {
		f.finish(final)
	}
}

func (s *server) countDone(u sim.Usage) {
	s.metrics.success.Inc()
	s.metrics.promptTokens.Add(u.Prompt)
}

func (s *server) countPhase(phase string) {
	switch phase {
	case pdPrefill:
		s.metrics.pdPrefill.Inc()
	case pdDecode:
		s.metrics.pdDecode.Inc()
	}
}
