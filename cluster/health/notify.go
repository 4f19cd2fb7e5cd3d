package health

import (
	"slices"
	"sync"
	"sync/atomic"
)

// notifier delivers the judge's changes to the OnChange callbacks: it
// coalesces them (one delivery may stand for several) and runs the
// callbacks one at a time, outside every other lock. Safe for concurrent
// use.
type notifier struct {
	regMu     sync.Mutex // serialises registrations
	callbacks atomic.Pointer[[]func()]

	pending   atomic.Bool   // a change awaits delivery
	wake      chan struct{} // nudges Run to deliver now; capacity 1
	deliverMu sync.Mutex    // one delivery at a time, so callbacks never overlap
}

func newNotifier() *notifier { return &notifier{wake: make(chan struct{}, 1)} }

// add registers fn.
func (n *notifier) add(fn func()) {
	n.regMu.Lock()
	defer n.regMu.Unlock()
	var fns []func()
	if cur := n.callbacks.Load(); cur != nil {
		fns = slices.Clone(*cur)
	}
	fns = append(fns, fn)
	n.callbacks.Store(&fns)
}

// signal records a change for delivery; it never blocks.
func (n *notifier) signal() {
	n.pending.Store(true)
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// deliver runs the callbacks if a change is pending.
func (n *notifier) deliver() {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	if !n.pending.Swap(false) {
		return
	}
	if fns := n.callbacks.Load(); fns != nil {
		for _, fn := range *fns {
			fn()
		}
	}
}
