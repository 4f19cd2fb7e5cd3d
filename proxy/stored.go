package proxy

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/affinity"
)

// A stored response of the Responses API lives on the worker that made it:
// retrieving, deleting, cancelling or listing the input of one, and
// continuing a conversation from it (previous_response_id), must go to that
// worker. The replica remembers the owner of every response it relayed; a
// response some other replica relayed is found by asking the workers.

// maxStoredResponses bounds how many owners a replica remembers.
const maxStoredResponses = 100_000

// responseOwners remembers which worker made which stored response: a map
// with a ring that evicts the oldest ids first.
type responseOwners struct {
	mu    sync.Mutex
	owner map[string]affinity.WorkerID
	ring  []string
	next  int
}

func newResponseOwners() *responseOwners {
	return &responseOwners{owner: map[string]affinity.WorkerID{}, ring: make([]string, maxStoredResponses)}
}

func (o *responseOwners) put(id string, w affinity.WorkerID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.owner[id]; ok {
		o.owner[id] = w
		return
	}
	if old := o.ring[o.next]; old != "" {
		delete(o.owner, old)
	}
	o.ring[o.next], o.next = id, (o.next+1)%len(o.ring)
	o.owner[id] = w
}

func (o *responseOwners) get(id string) (affinity.WorkerID, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.owner[id]
	return w, ok
}

func (o *responseOwners) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.owner, id)
}

// responseID finds the id of the response in an answer, or the first event
// of a stream (response.created carries it): the first "id":"resp_...".
func responseID(b []byte) string {
	i := bytes.Index(b, []byte(`"id":"resp_`))
	if i < 0 {
		return ""
	}
	rest := b[i+len(`"id":"`):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || end > 256 {
		return ""
	}
	return string(rest[:end])
}

// learnOwner records the worker that answered a POST /v1/responses.
func (p *Proxy) learnOwner(w affinity.WorkerID, answer []byte) {
	if id := responseID(answer); id != "" {
		p.owners.put(id, w)
	}
}

// ownerOf returns the worker that holds response id, asking the workers of
// the final role in turn when this replica did not relay it.
func (p *Proxy) ownerOf(ctx context.Context, id string) (affinity.WorkerID, bool) {
	if w, ok := p.owners.get(id); ok {
		return w, true
	}
	for _, m := range p.fleet.view().ordered {
		if m.Role != p.finalRole() {
			continue
		}
		if _, err := p.get(ctx, m.Worker, "/v1/responses/"+id); err == nil {
			p.owners.put(id, m.ID)
			return m.ID, true
		}
	}
	return 0, false
}

// storedResponseID reads the id of /v1/responses/{id}[/cancel|/input|/input_items].
func storedResponseID(path []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(path, []byte("/v1/responses/"))
	if !ok || len(rest) == 0 {
		return "", false
	}
	id, sub, _ := strings.Cut(string(rest), "/")
	switch sub {
	case "", "cancel", "input", "input_items":
		return id, id != "" && !strings.ContainsAny(id, "?#%")
	}
	return "", false
}

// serveStoredResponse forwards a request about a stored response to the
// worker that holds it, whole and as it is.
func (p *Proxy) serveStoredResponse(ctx *fasthttp.RequestCtx, id string) {
	x := p.newExchange(ctx, storedResponses)
	owner, ok := p.ownerOf(p.ctx, id)
	if !ok {
		x.errType = "not_found"
		writeErrorStatus(ctx, fasthttp.StatusNotFound, "invalid_request_error", "no worker holds a response with id "+id)
		p.metrics.request(x.ep, fasthttp.StatusNotFound, x.errType, x.start)
		return
	}
	p.servePinned(x, owner)
	if ctx.IsDelete() && ctx.Response.StatusCode()/100 == 2 {
		p.owners.forget(id)
	}
}

// servePinned sends x, whole, to worker w only: one attempt, no choice.
func (p *Proxy) servePinned(x *exchange, w affinity.WorkerID) {
	if err := p.admission.admit(p.ctx, x); err != nil {
		p.refuse(x, err)
		p.metrics.request(x.ep, x.ctx.Response.StatusCode(), x.errType, x.start)
		return
	}
	streaming := false
	defer func() {
		if !streaming {
			p.done(x, x.ctx.Response.StatusCode(), false)
		}
	}()
	load := p.deps.Loads.Get(w)
	p.begin(x)
	l := &leg{router: p.finalRouter(), pool: affinity.NewPool([]*affinity.Load{load}), body: x.body, attempts: 1,
		stream: true, toClient: true, pinned: true,
		first: &routed{dec: affinity.Decision{Worker: w}, guard: p.deps.Loads.Acquire(load)}}
	streaming = p.serveLeg(x, l)
}

// continueResponse sends a Responses API request that continues a stored
// response (previous_response_id) to the worker that holds it: no other
// worker could answer it.
func (p *Proxy) continueResponse(x *exchange) bool {
	owner, ok := p.ownerOf(&x.life, x.in.previous)
	if !ok {
		p.refuse(x, errorf(ErrBadRequest, "no worker holds the previous response %s", x.in.previous))
		return false
	}
	load := p.deps.Loads.Get(owner)
	router := p.finalRouter()
	l := &leg{router: router, pool: affinity.NewPool([]*affinity.Load{load}), body: x.body, attempts: 1,
		stream: true, toClient: true, pinned: true,
		first: &routed{dec: affinity.Decision{Worker: owner}, guard: p.deps.Loads.Acquire(load)}}
	return p.serveLeg(x, l)
}

// serveAnyWorker forwards a request about the engine (get_model_info,
// get_server_info, health_generate) to the least loaded eligible worker.
func (p *Proxy) serveAnyWorker(ctx *fasthttp.RequestCtx) {
	x := p.newExchange(ctx, workerInfo)
	pool, err := p.fleet.view().pool(p.finalRole(), "")
	if err != nil {
		p.refuse(x, err)
		p.metrics.request(x.ep, ctx.Response.StatusCode(), x.errType, x.start)
		return
	}
	least := pool.At(0)
	for i := range pool.Len() {
		if l := pool.At(i); l.Merged() < least.Merged() {
			least = l
		}
	}
	p.servePinned(x, least.ID())
}
