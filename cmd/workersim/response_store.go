package main

import (
	"container/list"
	"sync"

	"github.com/kvrouter/kvrouter/sim"
)

// The statuses of a response object.
const (
	statusQueued     = "queued"
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusCancelled  = "cancelled"
	statusFailed     = "failed"
)

// storedResponse is a response the Responses API keeps for GET, input_items and
// previous_response_id.
type storedResponse struct {
	meta    responseMeta
	status  string
	usage   sim.Usage     // final once status is completed
	input   []sim.Message // this response's input items, instructions excluded
	history []byte        // the rendered conversation through this response (its output once completed); never appended to in place
	run     *backgroundRun
}

// active reports whether the response is still being generated (background mode only).
func (r *storedResponse) active() bool {
	return r.status == statusQueued || r.status == statusInProgress
}

// backgroundRun is the handle on a background response's goroutine: cancel asks it to stop,
// finished is closed when it has.
type backgroundRun struct {
	stop     chan struct{}
	finished chan struct{}
	once     sync.Once
}

func newBackgroundRun() *backgroundRun {
	return &backgroundRun{stop: make(chan struct{}), finished: make(chan struct{})}
}

func (b *backgroundRun) cancel() { b.once.Do(func() { close(b.stop) }) }

// responseStore holds at most limit responses, evicting the least recently used (an evicted
// background response is cancelled, since nobody can fetch its result any more). Reads return
// copies. Safe for concurrent use.
type responseStore struct {
	mu    sync.Mutex
	limit int
	lru   *list.List // of *storedResponse, most recently used at the front
	byID  map[string]*list.Element
}

func newResponseStore(limit int) *responseStore {
	return &responseStore{limit: limit, lru: list.New(), byID: make(map[string]*list.Element)}
}

// put stores r, replacing a response of the same id.
func (st *responseStore) put(r storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e, ok := st.byID[r.meta.id]; ok {
		st.lru.Remove(e)
	}
	st.byID[r.meta.id] = st.lru.PushFront(&r)
	for st.lru.Len() > st.limit {
		st.drop(st.lru.Back())
	}
}

func (st *responseStore) drop(e *list.Element) {
	r := st.lru.Remove(e).(*storedResponse)
	delete(st.byID, r.meta.id)
	if r.run != nil && r.active() {
		r.run.cancel()
	}
}

// get returns a copy of the response and marks it recently used.
func (st *responseStore) get(id string) (storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return storedResponse{}, false
	}
	st.lru.MoveToFront(e)
	return *e.Value.(*storedResponse), true
}

// remove deletes the response and returns what it was.
func (st *responseStore) remove(id string) (storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return storedResponse{}, false
	}
	r := *e.Value.(*storedResponse)
	st.drop(e)
	return r, true
}

// update applies fn to a response still being generated; it reports false when the response is
// gone or no longer active (cancelled, so its result is not recorded).
func (st *responseStore) update(id string, fn func(*storedResponse)) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return false
	}
	r := e.Value.(*storedResponse)
	if !r.active() {
		return false
	}
	fn(r)
	return true
}

// cancel marks an active background response cancelled and returns it; cancellable is false
// (and nothing changes) when the response is not one.
func (st *responseStore) cancel(id string) (r storedResponse, found, cancellable bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return storedResponse{}, false, false
	}
	p := e.Value.(*storedResponse)
	if p.run == nil || !p.active() {
		return *p, true, false
	}
	p.status = statusCancelled
	return *p, true, true
}
