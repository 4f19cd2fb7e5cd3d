package proxy

import (
	"container/list"
	"sync"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/credential"
)

// responseOwner is who a stored response belongs to: the worker that holds
// it, for the key that made it (the zero ID: no key).
type responseOwner struct {
	worker affinity.WorkerID
	key    credential.ID
}

// DefaultStoredResponseOwnerBytes is Config.StoredResponseOwnerBytes when
// unset: 16 MiB, some 90,000 owners of vLLM's ids.
const DefaultStoredResponseOwnerBytes = 16 << 20

// ownerEntryBytes is what an owner costs beyond its id: the list element,
// the map entry and the owner itself.
const ownerEntryBytes = 144

// responseOwners remembers which worker made which stored response for
// which key. Clients make ids (each POST /v1/responses, each lookup that
// finds one), so the table is bounded in bytes, not entries: past its
// budget the least recently used owners are forgotten (a forgotten owner
// is found again by asking the workers).
type responseOwners struct {
	mu     sync.Mutex
	limit  int64
	bytes  int64
	byID   map[string]*list.Element
	recent list.List // of *ownedResponse, the least recently used first
}

type ownedResponse struct {
	id    string
	owner responseOwner
}

func newResponseOwners(limit int64) *responseOwners {
	return &responseOwners{limit: limit, byID: map[string]*list.Element{}}
}

func ownedBytes(id string) int64 { return int64(len(id)) + ownerEntryBytes }

// put records id's owner, forgetting the least recently used past the
// budget.
func (o *responseOwners) put(id string, w responseOwner) { o.record(id, w, true) }

// putNew records id's owner unless it has one.
func (o *responseOwners) putNew(id string, w responseOwner) { o.record(id, w, false) }

func (o *responseOwners) record(id string, w responseOwner, replace bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.byID[id]; ok {
		if replace {
			e.Value.(*ownedResponse).owner = w
		}
		o.recent.MoveToBack(e)
		return
	}
	o.byID[id] = o.recent.PushBack(&ownedResponse{id: id, owner: w})
	o.bytes += ownedBytes(id)
	for o.bytes > o.limit && o.recent.Len() > 0 {
		o.remove(o.recent.Front())
	}
}

func (o *responseOwners) get(id string) (responseOwner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.byID[id]
	if !ok {
		return responseOwner{}, false
	}
	o.recent.MoveToBack(e)
	return e.Value.(*ownedResponse).owner, true
}

func (o *responseOwners) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.byID[id]; ok {
		o.remove(e)
	}
}

func (o *responseOwners) remove(e *list.Element) {
	r := o.recent.Remove(e).(*ownedResponse)
	delete(o.byID, r.id)
	o.bytes -= ownedBytes(r.id)
}

// held is the bytes the owners take.
func (o *responseOwners) held() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes
}
