package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
)

// How an exchange in flight is cut short. The client leaving, the router
// giving up on a request, the proxy shutting down and health judging an
// attempt stuck all end the same way: the upstream connection the attempt
// is on is closed, whatever the exchange is waiting on (a dial, the
// response headers, the next chunk of a stream), so the engine stops
// generating. These are plain locks and lists rather than context
// callbacks: a request registers nothing with anything shared.

// liveConn is told which connection an exchange is on, so that it can cut
// it. attach fails when the exchange was cut already; detach reports
// whether the connection is still intact (false: it was cut, and closed,
// meanwhile).
type liveConn interface {
	attach(c *upConn) bool
	detach(c *upConn) bool
}

// connGuard is the liveConn of a client's exchange: the connection of its
// current attempt. The zero value is ready to use.
type connGuard struct {
	mu    sync.Mutex
	live  *upConn
	owner *attempt // the attempt live belongs to
	cut   bool     // live was closed by a cut
	ended bool     // the exchange was aborted: no connection may start
}

// attachFor records that c is owner's connection, unless the exchange was
// aborted or owner judged stuck (cutAttempt found no connection to cut).
func (g *connGuard) attachFor(owner *attempt, c *upConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended || owner.stuck.Load() {
		return false
	}
	g.live, g.owner, g.cut = c, owner, false
	return true
}

func (g *connGuard) detach(c *upConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.live != c {
		return true
	}
	intact := !g.cut
	g.live, g.owner, g.cut = nil, nil, false
	return intact
}

// abort closes the live connection, and every later one before it starts.
func (g *connGuard) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended = true
	g.closeLive()
}

// cutAttempt closes the live connection if it is owner's; owner, judged
// stuck before, attaches no later one.
func (g *connGuard) cutAttempt(owner *attempt) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.owner == owner {
		g.closeLive()
	}
}

func (g *connGuard) closeLive() {
	if g.live != nil && !g.cut {
		g.live.Close()
		g.cut = true
	}
}

// attemptConn is an attempt's view of its exchange's guard.
type attemptConn struct{ a *attempt }

func (c attemptConn) attach(u *upConn) bool { return c.a.x.guard.attachFor(c.a, u) }
func (c attemptConn) detach(u *upConn) bool { return c.a.x.guard.detach(u) }

// ctxConn is the liveConn of an exchange that ends with a context (the
// discovery of a worker's models, which shutdown ends).
type ctxConn struct {
	ctx  context.Context
	stop func() bool
}

func (c *ctxConn) attach(u *upConn) bool {
	c.stop = context.AfterFunc(c.ctx, func() { u.Close() })
	return c.ctx.Err() == nil
}

func (c *ctxConn) detach(*upConn) bool { return c.stop == nil || c.stop() }

// flights are the exchanges in flight, so that shutdown can abort them.
type flights struct {
	mu   sync.Mutex
	head *exchange
}

func (f *flights) add(x *exchange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x.prev, x.next = nil, f.head
	if f.head != nil {
		f.head.prev = x
	}
	f.head = x
	x.flying = true
}

func (f *flights) remove(x *exchange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !x.flying {
		return
	}
	if x.prev != nil {
		x.prev.next = x.next
	} else {
		f.head = x.next
	}
	if x.next != nil {
		x.next.prev = x.prev
	}
	x.prev, x.next, x.flying = nil, nil, false
}

// abortAll aborts every exchange in flight with cause.
func (f *flights) abortAll(cause error) {
	for _, x := range f.all() {
		x.abort(cause)
	}
}

// all lists the exchanges in flight.
func (f *flights) all() []*exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []*exchange
	for x := f.head; x != nil; x = x.next {
		all = append(all, x)
	}
	return all
}

// markMoveOff asks the stream whose live attempt is on worker w to move
// off it (migrate.go); it reports whether there was one.
func (g *connGuard) markMoveOff(w affinity.WorkerID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.owner == nil || g.owner.m.ID != w || !g.owner.streamed {
		return false
	}
	g.owner.moveOff.Store(true)
	return true
}

// longAgo is a deadline in the past: set on a connection, it ends the
// read waiting on it at once.
var longAgo = time.Unix(1, 0)

// markGiveWay asks the stream whose live attempt is on worker w to give
// its slot way (preempt.go), at once: its read of the worker's next chunk
// is interrupted (a read deadline in the past), so that the slot frees
// within the engine's current step rather than after its next one. It
// returns the channel closed once the stream gave way or cannot, nil when
// there was no stream on w not asked already to move.
func (g *connGuard) markGiveWay(w affinity.WorkerID) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.owner == nil || g.owner.m.ID != w || !g.owner.streamed || g.owner.moveOff.Load() {
		return nil
	}
	c := make(chan struct{})
	if !g.owner.giveWay.CompareAndSwap(nil, &c) {
		return nil
	}
	if g.live != nil {
		_ = g.live.SetReadDeadline(longAgo)
	}
	return c
}

// on reports whether the live attempt is on worker w.
func (g *connGuard) on(w affinity.WorkerID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.owner != nil && g.owner.m.ID == w
}

// exchangeCtx is the context of an exchange's attempts (their dials and
// backoffs wait on it): done when the exchange is aborted or finished, with
// the cause given. It lives inside the exchange, and makes its channel
// only when something waits on it, so a request that dials nothing and is
// not retried allocates nothing for it.
type exchangeCtx struct {
	mu    sync.Mutex
	done  chan struct{}
	cause error
}

var _ context.Context = (*exchangeCtx)(nil)

func (c *exchangeCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *exchangeCtx) Value(any) any               { return nil }

func (c *exchangeCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.cause != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *exchangeCtx) Err() error {
	if c.why() != nil {
		return context.Canceled
	}
	return nil
}

// why is the cause the context ended with, nil while it has not.
func (c *exchangeCtx) why() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// end ends the context with cause (context.Canceled when nil); later calls
// do nothing.
func (c *exchangeCtx) end(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return
	}
	c.cause = cause
	if c.done != nil {
		close(c.done)
	}
}
