package proxy

import (
	"bytes"
	"context"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/credential"
)

// A stored response of the Responses API lives on the worker that made it:
// retrieving, deleting, cancelling or listing the input of one, and
// continuing a conversation from it (previous_response_id), must go to that
// worker. With --api-keys it also belongs to the key that made it: another
// key gets 404, as for an id no worker holds.
//
// The replica remembers the owner (worker and key) of every response it
// relayed, by the id it found in that worker's own answer. A response some
// other replica relayed is found by asking the workers, and the key must
// travel with it: every replica chooses the response's id (vLLM's
// request_id) and writes into the request's metadata (ownerMetadataKey) a
// seal of that id and the key (ownerseal.go), which no worker can make;
// the engine stores it with the response and shows it on retrieval, and a
// replica accepts a worker's answer as the owner only when it is that very
// response (its id) and carries the seal of that id for the caller's key.
// A worker that answers 200 to any id, with any seal it saw, therefore owns
// nothing it did not make for that key.

// ownership is who owns each stored response: the owners this replica
// remembers, the seal that binds a response to its key, and the search of
// the workers for one it does not remember.
type ownership struct {
	owners *responseOwners
	seal   *ownerSeal
	calls  *workerCalls
	fleet  *Fleet
	role   func() string // the role of the workers that store responses
}

func newOwnership(maxBytes int64, secrets func() [][]byte, calls *workerCalls, role func() string, set *metrics.Set) *ownership {
	o := &ownership{owners: newResponseOwners(maxBytes), seal: newOwnerSeal(secrets), calls: calls, fleet: calls.fleet, role: role}
	set.NewGauge("vllm_router_stored_response_owner_bytes", func() float64 { return float64(o.owners.held()) })
	return o
}

// ownerMetadataKey is the metadata entry that carries the seal of the key
// that made a stored response.
const ownerMetadataKey = "kvrouter_owner"

// responseIDField is the body field vLLM takes a response's id from.
const responseIDField = "request_id"

// callerKey is the identity of the key x's request presents, or the zero
// ID when the API takes no keys.
func callerKey(x *exchange) credential.ID {
	if !x.caller.verified {
		return credential.ID{}
	}
	return x.caller.id // the door let only a key of --api-keys in
}

// maxResponseIDLen bounds the ids the router learns.
const maxResponseIDLen = 256

// responseID finds the id of the response object in a worker's answer to
// POST /v1/responses: its top-level "id", or, for a stream, the "id" of
// the "response" of its first event (response.created). It reads the JSON
// with the scanner, so spacing and key order do not matter, and an id
// inside some other value is never taken.
func responseID(answer []byte) string {
	doc := answer
	if data, ok := firstEventData(answer); ok {
		doc = data
		if inner, ok := jsonMember(doc, "response"); ok {
			doc = inner
		}
	}
	id, ok := jsonMemberString(doc, "id")
	if !ok || !bytes.HasPrefix(id, []byte("resp_")) || len(id) > maxResponseIDLen || bytes.ContainsAny(id, "/?#%\\") {
		return ""
	}
	return string(id)
}

// firstEventData is the data of the first event of an SSE stream, when b
// starts as one.
func firstEventData(b []byte) ([]byte, bool) {
	for len(b) > 0 {
		line := b
		n := bytes.IndexByte(b, '\n')
		if n < 0 {
			return nil, false // the event is not whole
		}
		line, b = bytes.TrimSuffix(b[:n], []byte("\r")), b[n+1:]
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(data), true
		}
		if len(line) > 0 && !bytes.HasPrefix(line, []byte("event:")) && line[0] != ':' {
			return nil, false
		}
	}
	return nil, false
}

// jsonMember is the raw value of the top-level member key of the object
// doc, when doc is one that holds it.
func jsonMember(doc []byte, key string) ([]byte, bool) {
	vs := jsonSkipWS(doc, 0)
	if vs >= len(doc) || doc[vs] != '{' {
		return nil, false
	}
	var found []byte
	_, err := jsonEachMember(doc, vs, 0, func(k []byte, vs int) (int, error) {
		ve, err := jsonSkipValue(doc, vs, 1)
		if err == nil && found == nil && string(k) == key {
			found = doc[vs:ve]
		}
		return ve, err
	})
	return found, err == nil && found != nil
}

// jsonMemberString is the top-level string member key of the object doc,
// raw (an id has nothing to unescape).
func jsonMemberString(doc []byte, key string) ([]byte, bool) {
	v, ok := jsonMember(doc, key)
	if !ok || len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

// learn records the worker that answered a POST /v1/responses for
// the caller's key, under the id of that answer: the id the router chose,
// or, from an engine that ignores request_id, one the replica does not
// know yet (a worker that answers with another response's id takes
// nothing from its owner).
func (o *ownership) learn(x *exchange, w affinity.WorkerID, answer []byte) {
	id := responseID(answer)
	switch owner := (responseOwner{worker: w, key: callerKey(x)}); {
	case id == "":
	case id == x.responseID:
		o.owners.put(id, owner)
	default:
		o.owners.putNew(id, owner)
	}
}

// ownerOf returns the worker that holds response id for the caller's key,
// asking the workers of the final role in turn when this replica did not
// relay it. ctx is the request's: a client that leaves ends the search.
func (o *ownership) ownerOf(ctx context.Context, id string, key credential.ID) (affinity.WorkerID, bool) {
	if known, ok := o.owners.get(id); ok {
		return known.worker, known.key == key
	}
	for _, m := range o.fleet.view().ordered {
		if m.Role != o.role() {
			continue
		}
		if ctx.Err() != nil {
			return 0, false
		}
		if body, err := o.calls.get(ctx, m.Worker, "/v1/responses/"+id); err == nil && o.holds(body, id, key) {
			o.owners.put(id, responseOwner{worker: m.ID, key: key})
			return m.ID, true
		}
	}
	return 0, false
}

// holds reports whether a worker's answer to GET /v1/responses/id
// is that response, sealed for key.
func (o *ownership) holds(body []byte, id string, key credential.ID) bool {
	got, ok := jsonMemberString(body, "id")
	if !ok || string(got) != id {
		return false
	}
	meta, ok := jsonMember(body, "metadata")
	if !ok {
		return false
	}
	seal, ok := jsonMemberString(meta, ownerMetadataKey)
	return ok && o.seal.holds(seal, id, key)
}

// stamp gives a POST /v1/responses body the response's id, chosen by
// the router (request_id), and the seal of that id and the caller's key in
// its metadata, each over any value the client gave it: every spelling of
// the field is deleted first, so no parser, whether the first or the last
// of duplicate keys wins, reads the client's. A metadata object that names
// a key twice is a 400: vLLM keeps the last, and a client could otherwise
// plant a seal behind the router's.
func (o *ownership) stamp(x *exchange) error {
	if err := uniqueMetadata(x.body); err != nil {
		return err
	}
	var parser fastjson.Parser
	v, err := parser.ParseBytes(x.body)
	if err != nil {
		return errorf(ErrBadRequest, "malformed JSON body: %v", err)
	}
	x.responseID = newResponseID()
	var a fastjson.Arena
	setOnly(v, responseIDField, a.NewString(x.responseID))
	meta := v.Get("metadata")
	if meta == nil || meta.Type() != fastjson.TypeObject {
		meta = a.NewObject()
		setOnly(v, "metadata", meta)
	}
	setOnly(meta, ownerMetadataKey, a.NewString(o.seal.seal(x.responseID, callerKey(x))))
	x.body = v.MarshalTo(nil)
	return nil
}

// setOnly makes val the one value of key in the object o.
func setOnly(o *fastjson.Value, key string, val *fastjson.Value) {
	for o.Get(key) != nil {
		o.Del(key)
	}
	o.Set(key, val)
}

// uniqueMetadata refuses a body whose metadata object names a key twice.
func uniqueMetadata(body []byte) error {
	meta, ok := jsonMember(body, "metadata")
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return nil
	}
	var keys keySet
	_, err := jsonEachMember(meta, 0, 2, func(raw []byte, vs int) (int, error) {
		if key, dup := keys.add(raw); dup {
			return vs, duplicateKey("metadata", key)
		}
		return jsonSkipValue(meta, vs, 2)
	})
	if _, isAPI := err.(*apiError); err != nil && !isAPI {
		return malformed(err)
	}
	return err
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

// planStored is the plan of a request about a stored response: whole and
// as it is, to the worker that holds it for the caller's key. The search
// for it comes after admission (at the door) and ends when the client
// leaves.
func (p *Proxy) planStored(x *exchange) (*leg, error) {
	id, _ := storedResponseID(x.ctx.Path())
	p.begin(x)
	owner, ok := p.owned.ownerOf(&x.life, id, callerKey(x))
	switch {
	case x.life.why() != nil:
		return nil, x.life.why()
	case !ok:
		return nil, errorf(ErrNotFound, "no worker holds a response with id %s", id)
	}
	return p.pinnedLeg(x, owner), nil
}

// hear keeps the owners of stored responses up to date with a
// worker's whole answer: the response a POST /v1/responses made is
// learned, the one a DELETE removed forgotten.
func (o *ownership) hear(x *exchange, w affinity.WorkerID, status int, answer []byte) {
	if status/100 != 2 {
		return
	}
	switch {
	case x.ep == responses:
		o.learn(x, w, answer)
	case x.ep == storedResponses && x.ctx.IsDelete():
		id, _ := storedResponseID(x.ctx.Path())
		o.owners.forget(id)
	}
}

// pinnedLeg is the leg that sends x, whole, to worker w only: one attempt,
// no choice. x has begun.
func (p *Proxy) pinnedLeg(x *exchange, w affinity.WorkerID) *leg {
	load := p.deps.Loads.Get(w)
	l := p.newLeg(x, "", p.finalRouter(), nil, affinity.NewPool([]*affinity.Load{load}))
	l.pin(&routed{dec: affinity.Decision{Worker: w}, guard: p.deps.Loads.Acquire(load)})
	return l
}

// continuedLeg is the leg of a Responses API request that continues a
// stored response (previous_response_id): to the worker that holds it for
// the caller's key, since no other worker could answer it.
func (p *Proxy) continuedLeg(x *exchange) (*leg, error) {
	owner, ok := p.owned.ownerOf(&x.life, x.in.previous, callerKey(x))
	if !ok {
		if why := x.life.why(); why != nil {
			return nil, why
		}
		return nil, errorf(ErrNotFound, "no worker holds the previous response %s", x.in.previous)
	}
	return p.pinnedLeg(x, owner), nil
}

// planAnyWorker is the plan of a request about the engine (get_model_info,
// get_server_info, health_generate): to the least loaded eligible worker.
func (p *Proxy) planAnyWorker(x *exchange) (*leg, error) { return p.leastLoadedLeg(x, "") }
