package health

import (
	"context"
	"sync"
)

// probeNews broadcasts that some worker's probe was answered, so that
// AwaitProbed wakes without polling. Safe for concurrent use.
type probeNews struct {
	mu sync.Mutex
	ch chan struct{} // closed on the next answer
}

// next returns the channel the next answer closes.
func (n *probeNews) next() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// announce wakes every waiter.
func (n *probeNews) announce() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// AwaitProbed waits until each of the workers ids is watched and its health
// endpoint has answered a probe (well or not), or ctx ends, whose error it
// then returns. A replica calls it before it says it is ready, so that it
// routes at once to the workers it was started with. Run (or CheckNow) must
// be running for the probes to be sent.
func (m *Monitor) AwaitProbed(ctx context.Context, ids ...WorkerID) error {
	for {
		news := m.probed.next()
		if m.allProbed(ids) {
			return nil
		}
		select {
		case <-news:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *Monitor) allProbed(ids []WorkerID) bool {
	for _, id := range ids {
		if w := m.lookup(id); w == nil || !w.probed.Load() {
			return false
		}
	}
	return true
}
