package main

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

// handleInference serves POST /v1/completions (chat false) and /v1/chat/completions.
func (s *server) handleInference(ctx *fasthttp.RequestCtx, chat bool) {
	s.metrics.requests[string(ctx.Path())].Inc()
	req, err := s.parse(ctx.PostBody(), chat)
	if err != nil {
		s.failRequest(ctx, err)
		return
	}
	if s.drawError() {
		s.failRequest(ctx, errInjected)
		return
	}
	p, err := s.plan(req)
	if err != nil {
		s.failRequest(ctx, err)
		return
	}
	t, err := s.driver.Submit(p.sub)
	if err != nil {
		s.failRequest(ctx, err)
		return
	}
	head := responseHead{id: s.nextID(idPrefix(chat)), created: s.created, model: req.model, chat: chat}
	if p.stream {
		s.stream(ctx, t, head, p)
		return
	}
	s.respond(ctx, t, head, p)
}

func idPrefix(chat bool) string {
	if chat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

func (s *server) parse(body []byte, chat bool) (inferenceRequest, error) {
	parser := s.parsers.Get()
	defer s.parsers.Put(parser)
	req, err := parseInference(parser, body, chat)
	if err != nil {
		return req, err
	}
	if !s.cfg.serves(req.model) {
		return req, fmt.Errorf("%w: the model %q does not exist", errModelNotFound, req.model)
	}
	if req.model == "" {
		req.model = s.cfg.models[0]
	}
	return req, nil
}

// respond waits for the whole generation and answers with one JSON body. A client that closes
// its connection meanwhile has its request cancelled.
func (s *server) respond(ctx *fasthttp.RequestCtx, t *ticket, head responseHead, p servePlan) {
	w := watchConn(ctx.Conn())
	events, err := s.await(t, w.Gone(), nil, sim.Done)
	if w.Stop() {
		ctx.SetConnectionClose()
	}
	if err != nil {
		s.abandon(ctx, t, err)
		return
	}
	final := events[len(events)-1].Usage
	s.countDone(final)
	var kv []byte
	if p.kvReply {
		kv = s.appendKVReply(nil, final.Prompt)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(head.appendCompletion(nil, final, kv))
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
func (s *server) abandon(ctx *fasthttp.RequestCtx, t *ticket, err error) {
	if errors.Is(err, errClientGone) {
		s.clientGone(t)
		ctx.SetConnectionClose()
		return
	}
	s.driver.Cancel(t)
	s.failRequest(ctx, err)
}

// clientGone cancels the request of a client that went away; it counts the cancellation when
// the engine was still working on it.
func (s *server) clientGone(t *ticket) {
	if s.driver.Cancel(t) {
		s.metrics.cancelled.Inc()
	}
}

func (s *server) countDone(u sim.Usage) {
	s.metrics.success.Inc()
	s.metrics.promptTokens.Add(u.Prompt)
}
