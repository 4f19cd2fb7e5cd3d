package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kvevents/zmtp"
)

// HubWorker is one worker a Hub knows: its id, where its engine's events
// come from, and what names it in a topic.
type HubWorker struct {
	ID uint32
	// Endpoint is the engine's PUB socket to dial, tcp://host:port; "" when
	// this replica does not dial it (its engine dials the bound socket).
	Endpoint string
	// ReplayEndpoint is its replay socket, "" for none.
	ReplayEndpoint string
	// Host is the worker's host:port (its URL's), which a topic
	// kv@<host>@<model> names, and whose address a connection to the bound
	// socket must come from.
	Host string
	// Topic, when set, is the topic its engine publishes under, as the
	// worker was registered (kv_events_topic).
	Topic string
}

// HubConfig is what every view and subscriber of a Hub shares.
type HubConfig struct {
	ViewConfig
	// Origin is this replica's name, which its relay packets carry.
	Origin string
	// Allow is the worker-host policy (SubscriberConfig.Allow): every
	// endpoint and every worker host passes it. Required.
	Allow func(hostport string) (string, error)
	// Limits bound what an engine's sockets may send.
	Limits zmtp.Limits
	// Retry and ReplayTimeout: SubscriberConfig's.
	Retry         time.Duration
	ReplayTimeout time.Duration
	// Heartbeat is how often this replica tells its peers which engines it
	// hears through its bound socket (default 500 ms); a peer takes the
	// word for three of them.
	Heartbeat time.Duration
	// Fetch asks peer origin for its snapshots of workers (nil: no peers
	// to ask). The hub calls it from its own goroutine.
	Fetch func(ctx context.Context, origin string, workers []uint32) (map[uint32]Snapshot, error)
	// Peers lists the live peers a replica that starts asks for its
	// workers' sets (nil: none).
	Peers func() []string
	// MaxRelayBytes bounds the relay batches waiting to be sent (default
	// 4 MiB): past it they are dropped, and the peers, seeing the gap in
	// the next heartbeat, fetch a snapshot.
	MaxRelayBytes int
}

func (c HubConfig) withDefaults() HubConfig {
	c.ViewConfig = c.ViewConfig.withDefaults()
	if c.Heartbeat <= 0 {
		c.Heartbeat = 500 * time.Millisecond
	}
	if c.MaxRelayBytes <= 0 {
		c.MaxRelayBytes = 4 << 20
	}
	return c
}

// Hub keeps one View per worker as the registry changes, and what feeds
// them: a Subscriber for each worker it dials, the bound socket its
// engines dial (Listen), the peers' relays (Receive) and snapshots. Every
// set is keyed by cache identity (Keys), so a request's keys are computed
// once and asked of every worker.
//
// Concurrency: Sync, Listen and Close are serialised by the caller (the
// registry's follower); everything else may be called from any goroutine
// and reads an immutable table swapped by Sync.
type Hub struct {
	cfg   HubConfig
	table atomic.Pointer[hubTable]
	mu    sync.Mutex // serialises Sync, Listen and Close
	bind  *binder
	relay relayQueue
	rc    relayCounters

	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

// hubTable is the workers a hub knows, and how a topic finds one of them.
type hubTable struct {
	entries map[uint32]*hubEntry
	topics  topicIndex
}

type hubEntry struct {
	worker HubWorker
	addr   netip.Addr // the worker host's address, past the policy
	// replayTo is the engine's replay socket past the policy, for gaps
	// heard on the bound socket ("" for none).
	replayTo string
	view     *View
	sub      *Subscriber // nil when not dialed
	// claim is the bound connection that feeds the view, if any.
	claim atomic.Pointer[boundConn]
}

// NewHub is a hub that knows no worker yet; Close stops its goroutine.
func NewHub(cfg HubConfig) (*Hub, error) {
	if cfg.Allow == nil || cfg.BlockSize < 1 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("kvevents: a hub needs a host policy and a block size in 1..%d", MaxBlockSize)
	}
	h := &Hub{cfg: cfg.withDefaults(), done: make(chan struct{})}
	h.relay.w = relayWriter{origin: h.cfg.Origin, geo: h.geometry()}
	h.table.Store(&hubTable{entries: map[uint32]*hubEntry{}})
	var ctx context.Context
	ctx, h.stop = context.WithCancel(context.Background())
	go h.mend(ctx)
	return h, nil
}

// BlockSize is the engines' block size in tokens.
func (h *Hub) BlockSize() int { return h.cfg.BlockSize }

// Keys appends the keys of tokens' full blocks for the cache identity
// identity (the adapter's name, "" for the base model), as every set of
// the hub keys them.
func (h *Hub) Keys(dst []Key, identity string, tokens []uint32) []Key {
	return AppendKeys(dst, Seed(identity), tokens, h.cfg.BlockSize)
}

// Sync makes ws the workers known: a new worker gets a view (and a
// subscriber where it is dialed); one whose endpoints changed starts over
// with a new view; a worker gone loses both. An endpoint or a host the
// policy refuses is in the error, and that worker's engine is not heard
// (its requests route on the text index).
func (h *Hub) Sync(ws []HubWorker) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("kvevents: hub closed")
	}
	old := h.table.Load().entries
	next := &hubTable{entries: make(map[uint32]*hubEntry, len(ws))}
	var errs []error
	for _, w := range ws {
		if e, ok := old[w.ID]; ok && e.worker == w {
			next.entries[w.ID] = e
			continue
		}
		e, err := h.newEntry(w)
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", w.ID, err))
		}
		if e != nil {
			next.entries[w.ID] = e
		}
	}
	next.topics = newTopicIndex(next.entries)
	h.table.Store(next)
	for id, e := range old {
		if n, ok := next.entries[id]; !ok || n != e {
			e.close()
		}
	}
	return errors.Join(errs...)
}

// newEntry is a worker's view and subscriber. A host the policy refuses
// leaves the entry without an address (no bound connection is taken for
// it); an endpoint it refuses, without a subscriber.
func (h *Hub) newEntry(w HubWorker) (*hubEntry, error) {
	e := &hubEntry{worker: w, view: NewView(h.cfg.ViewConfig)}
	var errs []error
	if w.Host != "" {
		if a, err := h.cfg.Allow(w.Host); err != nil {
			errs = append(errs, err)
		} else if ap, err := netip.ParseAddrPort(a); err == nil {
			e.addr = ap.Addr().Unmap()
		}
	}
	if w.ReplayEndpoint != "" {
		if to, err := allowed(w.ReplayEndpoint, h.cfg.Allow); err != nil {
			errs = append(errs, err)
		} else {
			e.replayTo = to
		}
	}
	if w.Endpoint != "" {
		sub, err := Subscribe(e.view, SubscriberConfig{Endpoint: w.Endpoint, ReplayEndpoint: w.ReplayEndpoint,
			Allow: h.cfg.Allow, Limits: h.cfg.Limits, Retry: h.cfg.Retry, ReplayTimeout: h.cfg.ReplayTimeout,
			FromPeers: func(ctx context.Context) bool { return h.fromPeers(ctx, w.ID, e.view) }})
		if err != nil {
			errs = append(errs, err)
		} else {
			e.sub = sub
		}
	}
	return e, errors.Join(errs...)
}

func (e *hubEntry) close() {
	if e.sub != nil {
		e.sub.Close()
	}
	if c := e.claim.Load(); c != nil {
		c.close()
	}
}

// Listen makes the hub take the engines that dial ln (a bound SUB socket,
// --kv-events-bind): each connection must come from a known worker's
// address, and each batch's topic must name a worker on that address
// (topic.go). Close closes ln.
func (h *Hub) Listen(ln net.Listener) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bind != nil || h.closed {
		ln.Close()
		return errors.New("kvevents: the hub already listens, or is closed")
	}
	h.bind = newBinder(h, ln)
	return nil
}

// BoundAddr is the bound socket's address, nil without one.
func (h *Hub) BoundAddr() net.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bind == nil {
		return nil
	}
	return h.bind.addr()
}

// Close stops every subscriber, the bound socket and the hub's goroutine,
// and waits for them.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	if h.bind != nil {
		h.bind.close()
	}
	for _, e := range h.table.Swap(&hubTable{entries: map[uint32]*hubEntry{}}).entries {
		e.close()
	}
	h.stop()
	<-h.done
}

// entry is worker id's entry, nil for a worker the hub does not know.
func (h *Hub) entry(id uint32) *hubEntry { return h.table.Load().entries[id] }

// Matched is how many leading blocks of a prompt (by its Keys) worker id's
// engine holds now, and whether its view may be routed on. A worker the
// hub does not know is Disconnected.
func (h *Hub) Matched(id uint32, keys []Key) (int, Trust) {
	e := h.entry(id)
	if e == nil {
		return 0, Disconnected
	}
	if t := e.view.Trust(); t != Trusted {
		return 0, t
	}
	return e.view.Matched(keys), Trusted
}

// EvictedSince reports whether worker id's engine removed any of keys, or
// its set was emptied, at or after t (View.EvictedSince); true for a worker
// the hub does not know.
func (h *Hub) EvictedSince(id uint32, keys []Key, t time.Time) bool {
	e := h.entry(id)
	return e == nil || e.view.EvictedSince(keys, t)
}

// Expect says worker id was just given work that should store blocks
// (View.Expect).
func (h *Hub) Expect(id uint32) {
	if e := h.entry(id); e != nil {
		e.view.Expect()
	}
}

// EngineRunning says how many requests worker id's engine reports running
// (View.EngineRunning).
func (h *Hub) EngineRunning(id uint32, n int) {
	if e := h.entry(id); e != nil {
		e.view.EngineRunning(n)
	}
}

// WorkerStatus is what the hub knows of one worker's view.
type WorkerStatus struct {
	ViewStatus
	// Source is where the view hears the engine now: "dial" (this
	// replica's subscription), "bind" (the engine dialed this replica),
	// "peer" (a peer relays it) or "" (nothing).
	Source string
	// Violations counts connections to the engine ended by a breach of the
	// protocol or of the limits.
	Violations uint64
}

// Status is worker id's view; ok is false for a worker the hub does not
// know.
func (h *Hub) Status(id uint32) (WorkerStatus, bool) {
	e := h.entry(id)
	if e == nil {
		return WorkerStatus{ViewStatus: ViewStatus{Trust: Disconnected}}, false
	}
	s := WorkerStatus{ViewStatus: e.view.Status()}
	switch {
	case e.claim.Load() != nil:
		s.Source = "bind"
	case e.sub != nil && e.view.connected():
		s.Source = "dial"
	case e.view.relayed():
		s.Source = "peer"
	}
	if e.sub != nil {
		s.Violations = e.sub.Violations()
	}
	return s, true
}

// Each calls fn with every worker known and its status.
func (h *Hub) Each(fn func(id uint32, s WorkerStatus)) {
	for id := range h.table.Load().entries {
		s, _ := h.Status(id)
		fn(id, s)
	}
}
