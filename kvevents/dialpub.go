package kvevents

import (
	"context"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kvevents/zmtp"
)

// dialPubQueue bounds the messages a dialing publisher keeps while it is
// not connected, as libzmq's send high-water mark (1,000) does for vLLM's:
// a connection that comes back gets what was published meanwhile, in
// order, and past the bound the oldest are dropped (a gap the subscriber
// sees).
const dialPubQueue = 1000

// dialPub is the PUB side of an engine that dials a router's bound socket,
// as vLLM dials an endpoint that is not a wildcard: it connects, reconnects
// when the connection ends, and keeps what it publishes meanwhile (up to
// dialPubQueue messages), so that a router replica that goes away costs
// the engine's stream no batch when another takes the connection.
type dialPub struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	queue  [][][]byte // messages not yet written, oldest first
	wake   chan struct{}
	closed bool
}

func newDialPub(addr string) *dialPub {
	ctx, cancel := context.WithCancel(context.Background())
	p := &dialPub{addr: addr, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	go p.run(ctx)
	return p
}

// send queues one message.
func (p *dialPub) send(frames ...[]byte) {
	p.mu.Lock()
	if len(p.queue) == dialPubQueue {
		p.queue = p.queue[1:]
	}
	p.queue = append(p.queue, frames)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *dialPub) close() {
	p.cancel()
	<-p.done
}

func (p *dialPub) run(ctx context.Context) {
	defer close(p.done)
	for ctx.Err() == nil {
		if c, err := zmtp.DialPub(ctx, p.addr, zmtp.Limits{}); err == nil {
			p.serve(ctx, c)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serve writes the queue to c until the connection ends; a message whose
// write fails stays queued for the next connection.
func (p *dialPub) serve(ctx context.Context, c *zmtp.Conn) {
	defer c.Close()
	gone := make(chan struct{})
	go func() { // the subscriber's subscriptions, and its end
		defer close(gone)
		for {
			if _, err := c.Recv(); err != nil {
				return
			}
		}
	}()
	for {
		p.mu.Lock()
		var next [][]byte
		if len(p.queue) > 0 {
			next = p.queue[0]
		}
		p.mu.Unlock()
		if next != nil {
			if c.Send(next...) != nil {
				return
			}
			p.mu.Lock()
			p.queue = p.queue[1:]
			p.mu.Unlock()
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-gone:
			return
		case <-p.wake:
		}
	}
}
