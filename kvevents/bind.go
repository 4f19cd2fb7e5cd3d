package kvevents

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/kvevents/zmtp"
)

// BindStats counts what the bound socket refused, by cause.
type BindStats struct {
	// NotAWorker: connections from an address no known worker is on,
	// closed before a byte was read.
	NotAWorker uint64
	// Protocol: connections ended by a breach of ZMTP or of the limits
	// (a frame too large, a bad greeting, a silent handshake).
	Protocol uint64
	// Crowded: connections over the bounds in all or per host.
	Crowded uint64
	// Unknown, Ambiguous, Elsewhere: batches whose topic named no known
	// worker, could not tell between several, or named a worker on another
	// address than the connection's (topic.go). Dropped.
	Unknown, Ambiguous, Elsewhere uint64
	// Claimed: batches for a worker another connection feeds. Dropped.
	Claimed uint64
	// Unparsable: messages that were not [topic, sequence, payload].
	Unparsable uint64
}

// binder is a Hub's bound socket: the engines that dial the tier.
type binder struct {
	hub   *Hub
	l     *zmtp.SubListener
	stats struct {
		notAWorker, protocol, crowded, unknown, ambiguous, elsewhere, claimed, unparsable atomic.Uint64
	}
}

var errNotAWorker = errors.New("kvevents: no known worker is on that address")

func newBinder(h *Hub, ln net.Listener) *binder {
	b := &binder{hub: h}
	b.l = zmtp.ListenSub(ln, zmtp.ListenConfig{Limits: h.cfg.Limits, Admit: b.admit, Serve: b.serve, Refused: b.refused})
	return b
}

func (b *binder) addr() net.Addr { return b.l.Addr() }

func (b *binder) close() { b.l.Close() }

// admit takes a connection only from a known worker's address: the
// worker-host policy decided those addresses when the registry named them.
func (b *binder) admit(remote netip.AddrPort) error {
	if !b.hub.table.Load().topics.known(remote.Addr()) {
		return errNotAWorker
	}
	return nil
}

func (b *binder) refused(_ net.Addr, err error) {
	switch {
	case errors.Is(err, errNotAWorker):
		b.stats.notAWorker.Add(1)
	case errors.Is(err, zmtp.ErrTooManyConns), errors.Is(err, zmtp.ErrTooManyHost):
		b.stats.crowded.Add(1)
	default:
		b.stats.protocol.Add(1)
	}
}

// serve hears one engine's connection until it ends.
func (b *binder) serve(c *zmtp.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bc := &boundConn{b: b, c: c, remote: remoteAddr(c)}
	defer bc.release()
	for {
		frames, err := c.Recv()
		if err != nil {
			if errors.Is(err, zmtp.ErrProtocol) {
				b.stats.protocol.Add(1)
			}
			return
		}
		topic, seq, payload, ok := eventMessage(frames)
		if !ok {
			b.stats.unparsable.Add(1)
			continue
		}
		e := bc.entry(topic)
		if e == nil {
			continue
		}
		if from, gap := e.view.Offer(topic, seq, payload); gap {
			b.fill(ctx, e, from)
		}
	}
}

// fill replays a gap from the engine's replay socket, if it has one.
func (b *binder) fill(ctx context.Context, e *hubEntry, from uint64) {
	if e.replayTo != "" {
		replay(ctx, e.replayTo, from, SubscriberConfig{Limits: b.hub.cfg.Limits, ReplayTimeout: b.hub.cfg.ReplayTimeout},
			e.view.Replayed)
	}
	e.view.EndReplay()
}

func remoteAddr(c *zmtp.Conn) netip.Addr {
	if t, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// boundConn is one engine's connection to the bound socket, and the
// workers it feeds.
type boundConn struct {
	b      *binder
	c      *zmtp.Conn
	remote netip.Addr
	mu     sync.Mutex
	topics map[string]*hubEntry // what each topic resolved to (at most maxTopicsPerConn)
}

// maxTopicsPerConn bounds the topics one connection may speak under: an
// engine uses one (one per data-parallel rank on a shared connection).
const maxTopicsPerConn = 16

// entry is the worker a batch under topic is for, claimed by this
// connection; nil (counted) when there is none, or another connection
// feeds it.
func (bc *boundConn) entry(topic string) *hubEntry {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if e, ok := bc.topics[topic]; ok && bc.b.hub.entry(e.worker.ID) == e && e.claim.Load() == bc {
		return e
	}
	t := bc.b.hub.table.Load()
	id, err := t.topics.resolve(t.entries, topic, bc.remote)
	if err != nil {
		bc.b.count(err)
		return nil
	}
	e := t.entries[id]
	if !bc.claim(e) {
		bc.b.stats.claimed.Add(1)
		return nil
	}
	if bc.topics == nil {
		bc.topics = map[string]*hubEntry{}
	}
	if len(bc.topics) < maxTopicsPerConn {
		bc.topics[topic] = e
	}
	return e
}

// claim makes bc the connection that feeds e: the view rejoins, and what it
// applies from the engine is relayed to the peers.
func (bc *boundConn) claim(e *hubEntry) bool {
	if e.claim.Load() == bc {
		return true
	}
	if !e.claim.CompareAndSwap(nil, bc) {
		return false
	}
	e.view.Connected()
	id := e.worker.ID
	e.view.Relay(func(a Applied) { bc.b.hub.relay.add(id, a, bc.b.hub.cfg.MaxRelayBytes) })
	return true
}

// release gives up every worker bc fed.
func (bc *boundConn) release() {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for _, e := range bc.topics {
		if e.claim.CompareAndSwap(bc, nil) {
			e.view.Relay(nil)
			e.view.Disconnected()
		}
	}
	bc.topics = nil
}

// close ends the connection (its worker left the registry).
func (bc *boundConn) close() { bc.c.Close() }

func (b *binder) count(err error) {
	switch err {
	case errTopicAmbiguous:
		b.stats.ambiguous.Add(1)
	case errTopicElsewhere:
		b.stats.elsewhere.Add(1)
	default:
		b.stats.unknown.Add(1)
	}
}

func (b *binder) snapshot() BindStats {
	s := &b.stats
	return BindStats{NotAWorker: s.notAWorker.Load(), Protocol: s.protocol.Load(), Crowded: s.crowded.Load(),
		Unknown: s.unknown.Load(), Ambiguous: s.ambiguous.Load(), Elsewhere: s.elsewhere.Load(),
		Claimed: s.claimed.Load(), Unparsable: s.unparsable.Load()}
}

// BindStats is what the bound socket refused so far (zero without one).
func (h *Hub) BindStats() BindStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bind == nil {
		return BindStats{}
	}
	return h.bind.snapshot()
}
