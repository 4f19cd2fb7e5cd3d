package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
)

// Default and bound of input_items' limit, as OpenAI's.
const (
	defaultItemsLimit = 20
	maxItemsLimit     = 100
)

// storedResponseHandler routes rest, the path after /v1/responses/: GET {id}, DELETE {id},
// POST {id}/cancel, and GET {id}/input_items (OpenAI's name) or {id}/input (the path vllm-router
// forwards).
func (ra *responsesAPI) storedResponseHandler(method []byte, rest string) fasthttp.RequestHandler {
	id, action, _ := strings.Cut(rest, "/")
	if id == "" {
		return nil
	}
	var e endpoint
	switch action {
	case "":
		e = endpoint{
			get: func(ctx *fasthttp.RequestCtx) { ra.getResponse(ctx, id) },
			del: func(ctx *fasthttp.RequestCtx) { ra.deleteResponse(ctx, id) },
		}
	case "cancel":
		e = endpoint{post: func(ctx *fasthttp.RequestCtx) { ra.cancelResponse(ctx, id) }}
	case "input_items", "input":
		e = endpoint{get: func(ctx *fasthttp.RequestCtx) { ra.listInputItems(ctx, id) }}
	}
	return e.handler(method)
}

func notFound(id string) error {
	return fmt.Errorf("%w: no response %q on this worker", errResponseNotFound, id)
}

func (ra *responsesAPI) getResponse(ctx *fasthttp.RequestCtx, id string) {
	r, ok := ra.store.get(id)
	if !ok {
		ra.reply.writeError(ctx, notFound(id))
		return
	}
	writeResponseObject(ctx, r)
}

func writeResponseObject(ctx *fasthttp.RequestCtx, r storedResponse) {
	var u *sim.Usage
	if r.status == statusCompleted {
		u = &r.usage
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendResponse(nil, r.meta, r.status, u))
}

// deleteResponse forgets a response; one still generating in the background is cancelled.
func (ra *responsesAPI) deleteResponse(ctx *fasthttp.RequestCtx, id string) {
	if _, ok := ra.store.remove(id); !ok {
		ra.reply.writeError(ctx, notFound(id))
		return
	}
	b := append([]byte(`{"id":`), appendJSONString(nil, id)...)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, `,"object":"response","deleted":true}`...))
}

// cancelResponse stops a background response that is queued or in progress and answers with it,
// cancelled, once the engine has dropped it. Any other response cannot be cancelled (400).
func (ra *responsesAPI) cancelResponse(ctx *fasthttp.RequestCtx, id string) {
	r, found, cancellable := ra.store.cancel(id)
	switch {
	case !found:
		ra.reply.writeError(ctx, notFound(id))
		return
	case !cancellable:
		ra.reply.writeError(ctx, fmt.Errorf("%w: response %q is %s; only a background response still queued or in progress can be cancelled",
			errBadRequest, id, r.status))
		return
	}
	r.run.cancel()
	select {
	case <-r.run.finished:
	case <-ra.stopping:
	}
	writeResponseObject(ctx, r)
}

// itemsQuery is the paging of input_items.
type itemsQuery struct {
	descending bool // order, desc by default
	limit      int
	after      string // an item id; the page starts after it
}

func parseItemsQuery(args *fasthttp.Args) (itemsQuery, error) {
	q := itemsQuery{descending: true, limit: defaultItemsLimit, after: string(args.Peek("after"))}
	switch order := string(args.Peek("order")); order {
	case "", "desc":
	case "asc":
		q.descending = false
	default:
		return q, fmt.Errorf("%w: order must be asc or desc", errBadRequest)
	}
	if l := args.Peek("limit"); len(l) > 0 {
		n, err := strconv.Atoi(string(l))
		if err != nil || n < 1 || n > maxItemsLimit {
			return q, fmt.Errorf("%w: limit must be within 1..%d", errBadRequest, maxItemsLimit)
		}
		q.limit = n
	}
	return q, nil
}

func (ra *responsesAPI) listInputItems(ctx *fasthttp.RequestCtx, id string) {
	q, err := parseItemsQuery(ctx.QueryArgs())
	if err != nil {
		ra.reply.writeError(ctx, err)
		return
	}
	r, ok := ra.store.get(id)
	if !ok {
		ra.reply.writeError(ctx, notFound(id))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendInputItems(nil, r, q))
}

// startBackground stores a background response as queued, answers with it at once and leaves
// its generation to a goroutine the server owns.
func (ra *responsesAPI) startBackground(ctx *fasthttp.RequestCtx, j job, r *responsesRenderer, t *ticket) {
	run := newBackgroundRun()
	ra.store.put(r.stored(run))
	if !ra.bg.Go(func() { ra.runBackground(j, r, t, run) }) {
		ra.store.remove(r.meta.id)
		ra.jobs.abandon(ctx, errShuttingDown, t)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendResponse(nil, r.meta, statusQueued, nil))
}

// runBackground waits for a background response's generation and records how it ended: in
// progress at its first token, then completed; cancelled (by cancel, delete or eviction), when
// the engine drops it; failed when the worker stops first.
func (ra *responsesAPI) runBackground(j job, r *responsesRenderer, t *ticket, run *backgroundRun) {
	defer close(run.finished)
	events, err := ra.jobs.await(t, run.stop, nil, sim.FirstToken)
	if err == nil && events[len(events)-1].Kind != sim.Done {
		ra.store.update(r.meta.id, func(st *storedResponse) { st.status = statusInProgress })
		events, err = ra.jobs.await(t, run.stop, events, sim.Done)
	}
	switch {
	case err == nil:
		ra.jobs.finish(j, []sim.Usage{events[len(events)-1].Usage})
	case errors.Is(err, errClientGone):
		ra.jobs.clientGone(t)
	default:
		ra.jobs.driver.Cancel(t)
		ra.store.update(r.meta.id, func(st *storedResponse) { st.status = statusFailed })
	}
}
