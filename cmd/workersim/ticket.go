package main

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/sim"
)

// ticket is a handler's view of one request inside the engine: the driver appends its events
// without ever blocking, and the handler takes them when notified. Safe for concurrent use by
// the driver and one handler.
type ticket struct {
	id      sim.RequestID
	pooled  bool          // an embedding or rerank pass: its one engine token is no generation
	arrived time.Duration // engine time of its submission
	ready   chan struct{} // has a token whenever events or a failure may be waiting
	mu      sync.Mutex
	events  []sim.Event
	err     error // set once when the driver stops; no events follow
}

func newTicket(id sim.RequestID) *ticket {
	return &ticket{id: id, ready: make(chan struct{}, 1)}
}

// push records an event; called by the driver only.
func (t *ticket) push(ev sim.Event) {
	t.mu.Lock()
	t.events = append(t.events, ev)
	t.mu.Unlock()
	t.signal()
}

// fail ends the ticket with err; called by the driver only.
func (t *ticket) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
	t.signal()
}

func (t *ticket) signal() {
	select {
	case t.ready <- struct{}{}:
	default:
	}
}

// take appends the pending events to dst and returns it, with the failure if the ticket failed.
func (t *ticket) take(dst []sim.Event) ([]sim.Event, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dst = append(dst, t.events...)
	clear(t.events)
	t.events = t.events[:0]
	return dst, t.err
}
