package health

import "sync"

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
