package proxy

import (
	"context"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/wire"
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
	if !x.caller.Verified {
		return credential.ID{}
	}
	return x.caller.ID // the door let only a key of --api-keys in
}

// learn records the worker that answered a POST /v1/responses for
// the caller's key, under the id of that answer: the id the router chose,
// or, from an engine that ignores request_id, one the replica does not
// know yet (a worker that answers with another response's id takes
// nothing from its owner).
func (o *ownership) learn(x *exchange, w affinity.WorkerID, answer []byte) {
	id := wire.ResponseID(answer)
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
	got, ok := wire.MemberString(body, "id")
	if !ok || string(got) != id {
		return false
	}
	meta, ok := wire.Member(body, "metadata")
	if !ok {
		return false
	}
	seal, ok := wire.MemberString(meta, ownerMetadataKey)
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
	if err := wire.UniqueMetadata(x.body); err != nil {
		return err
	}
	var parser fastjson.Parser
	v, err := parser.ParseBytes(x.body)
	if err != nil {
		return failure.Errorf(failure.ErrBadRequest, "malformed JSON body: %v", err)
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

// planStored is the plan of a request about a stored response: whole and
// as it is, to the worker that holds it for the caller's key. The search
// for it comes after admission (at the door) and ends when the client
// leaves.
func (x *exchange) planStored() (*leg, error) {
	id, _ := wire.StoredResponseID(x.ctx.Path())
	x.begin()
	owner, ok := x.path.owned.ownerOf(&x.life, id, callerKey(x))
	switch {
	case x.life.why() != nil:
		return nil, x.life.why()
	case !ok:
		return nil, failure.Errorf(failure.ErrNotFound, "no worker holds a response with id %s", id)
	}
	return x.path.legs.pinnedLeg(x, owner), nil
}

// The ownership is a hook of every exchange (hooks.go): it stamps a POST
// /v1/responses body, plans the leg of a request that continues a stored
// response, and learns the owners from the answers.

// parsed stamps the body of a POST /v1/responses: the engine stores the
// seal of the response's id and the key with the response, so that every
// replica can tell whose it is.
func (o *ownership) parsed(x *exchange) error {
	if x.ep != wire.Responses {
		return nil
	}
	return o.stamp(x)
}

// streamStarted learns the owner of the response a streamed POST
// /v1/responses makes, from its first event.
func (o *ownership) streamStarted(x *exchange, a *attempt) {
	if x.ep == wire.Responses {
		o.learn(x, a.m.ID, a.first)
	}
}

// heard keeps the owners of stored responses up to date with a
// worker's whole answer: the response a POST /v1/responses made is
// learned, the one a DELETE removed forgotten.
func (o *ownership) heard(x *exchange, w affinity.WorkerID, status int, answer []byte) {
	if status/100 != 2 {
		return
	}
	switch {
	case x.ep == wire.Responses:
		o.learn(x, w, answer)
	case x.ep == wire.StoredResponses && x.ctx.IsDelete():
		id, _ := wire.StoredResponseID(x.ctx.Path())
		o.owners.forget(id)
	}
}

// planLeg plans the leg of a Responses API request that continues a
// stored response (previous_response_id): to the worker that holds it for
// the caller's key, since no other worker could answer it.
func (o *ownership) planLeg(x *exchange, _ *affinity.Pool, _ uint64) (*leg, bool, error) {
	if x.in.Previous == "" {
		return nil, false, nil
	}
	owner, ok := o.ownerOf(&x.life, x.in.Previous, callerKey(x))
	if !ok {
		if why := x.life.why(); why != nil {
			return nil, true, why
		}
		return nil, true, failure.Errorf(failure.ErrNotFound, "no worker holds the previous response %s", x.in.Previous)
	}
	return x.path.legs.pinnedLeg(x, owner), true, nil
}

// planAnyWorker is the plan of a request about the engine (get_model_info,
// get_server_info, health_generate): to the least loaded eligible worker.
func (x *exchange) planAnyWorker() (*leg, error) { return x.leastLoadedLeg("") }
