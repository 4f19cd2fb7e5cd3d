package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/zmtp"
	"github.com/kvrouter/kvrouter/store"
)

// KVEvents configures routing on the engines' KV events (--kv-events).
// Engines are heard in either topology, or both at once: each replica dials
// every worker's KV-event endpoint (the registry's kv_events_endpoint, else
// the worker's host on port 5557: vLLM bound to tcp://*:5557), and with
// Bind each replica also binds a socket that engines dial (vLLM given the
// tier's address), and relays what it hears there to its peers. Zero
// fields take the defaults in their comments.
type KVEvents struct {
	// Enabled turns the mode on; off, nothing here is used.
	Enabled bool
	// BlockSize is the engines' block size in tokens
	// (--kv-events-block-size, default 16, vLLM's).
	BlockSize int
	// MaxBlocks bounds each worker's set of blocks (--kv-events-max-blocks,
	// default 65536). A replica takes the relay only of peers that agree
	// with it on this and the block size (each relay packet says both), so
	// that a relayed set is the same set.
	MaxBlocks int
	// ReplayOffset is the replay socket's port minus the event socket's
	// (--kv-events-replay-offset, default 1: vLLM's 5557 and 5558); negative
	// means the engines have no replay socket, and every gap empties a set.
	ReplayOffset int
	// StaleAfter is how long an engine given work (or reporting requests
	// running) may publish nothing before its stream is stale, and how long
	// a set emptied by a reset is not trusted (--kv-events-stale-after,
	// default 10 s).
	StaleAfter time.Duration
	// Reservation is how long a decision's blocks count as the worker's
	// before its events show them (--kv-events-reservation, default 2 s).
	Reservation time.Duration
	// Bind, when set, is the tcp://host:port of a SUB socket the engines
	// dial (--kv-events-bind). A worker is then dialed only where its
	// kv_events_endpoint is given.
	Bind string
	// MaxMessageBytes bounds one message of an engine's event sockets
	// (--kv-events-max-message-bytes, default 16 MiB).
	MaxMessageBytes int
}

// DefaultKVEvents is the mode's settings when no flag is given: off, with
// vLLM's block size and sockets.
func DefaultKVEvents() KVEvents {
	return KVEvents{BlockSize: 16, MaxBlocks: 1 << 16, ReplayOffset: 1, StaleAfter: 10 * time.Second,
		Reservation: 2 * time.Second, MaxMessageBytes: zmtp.DefaultMaxMessageBytes}
}

// Validate refuses a bad config, naming the flag.
func (k KVEvents) Validate() error {
	switch {
	case !k.Enabled:
		return nil
	case k.BlockSize < 0 || k.BlockSize > kvevents.MaxBlockSize:
		return flagErr("kv-events-block-size", "must be in 1..%d", kvevents.MaxBlockSize)
	case k.MaxBlocks < 0:
		return flagErr("kv-events-max-blocks", "must not be negative")
	case k.StaleAfter < 0:
		return flagErr("kv-events-stale-after", "must not be negative")
	case k.Reservation < 0:
		return flagErr("kv-events-reservation", "must not be negative")
	case k.MaxMessageBytes < 0:
		return flagErr("kv-events-max-message-bytes", "must not be negative")
	}
	if k.Bind != "" {
		if _, err := bindAddr(k.Bind); err != nil {
			return flagErr("kv-events-bind", "%v", err)
		}
	}
	return nil
}

// bindAddr is the host:port of a tcp://host:port bind endpoint ("*" for the
// host: every interface).
func bindAddr(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "tcp" || u.Port() == "" || u.Path != "" || u.User != nil || u.RawQuery != "" {
		return "", fmt.Errorf("%q is not tcp://host:port", endpoint)
	}
	host := u.Hostname()
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, u.Port()), nil
}

// kvHub is the replica's side of the KV events: the hub of views, what
// feeds them, and the per-worker metric series it registered. A nil *kvHub
// is the mode off: each method then does nothing.
type kvHub struct {
	hub     *kvevents.Hub
	cfg     KVEvents
	metrics *metrics.Set
	log     *slog.Logger
	mu      sync.Mutex // guards names and listening
	names   map[store.WorkerID][]string
	dialer  *workerurl.Dialer // resolves and checks every endpoint before it is dialed
	// bound is the --kv-events-bind listener, bound at start (a port in
	// use is refused then) and handed to the hub once the registry is
	// first known (an engine that dials before is held in its handshake,
	// not refused as a stranger).
	bound     net.Listener
	listening bool
	// onSync, when set, also hears the registry's workers (the
	// benchmark's oracle, kvevents_oracle.go).
	onSync func([]store.Worker)
}

// kvOracle replaces the source the core matches on; nil but in a build
// with the kvoracle tag (kvevents_oracle.go), which only the benchmark
// makes.
var kvOracle func(*kvHub) core.KVSource

// kvPeers is how the hub reaches the peers: its name, the live peers, and a
// snapshot fetch (kvevents_peers.go).
type kvPeers struct {
	origin string
	peers  func() []string
	fetch  func(ctx context.Context, origin string, workers []uint32) (map[uint32]kvevents.Snapshot, error)
}

// newKVHub builds the hub when the mode is on, binds --kv-events-bind, and
// registers the mode's replica-wide families, read from the core that
// routing returns; off, it is nil (the text index alone).
func newKVHub(k KVEvents, dialer *workerurl.Dialer, set *metrics.Set, log *slog.Logger,
	routing func() *core.Replica, peers kvPeers) (*kvHub, error) {
	if !k.Enabled {
		return nil, nil
	}
	if k.BlockSize == 0 {
		k.BlockSize = 16
	}
	h := &kvHub{cfg: k, metrics: set, log: log, names: map[store.WorkerID][]string{}, dialer: dialer}
	hub, err := kvevents.NewHub(kvevents.HubConfig{
		ViewConfig: kvevents.ViewConfig{BlockSize: k.BlockSize, MaxBlocks: k.MaxBlocks, StaleAfter: k.StaleAfter},
		Origin:     peers.origin, Allow: h.allow, Limits: zmtp.Limits{MaxMessageBytes: k.MaxMessageBytes},
		Fetch: peers.fetch, Peers: peers.peers})
	if err != nil {
		return nil, err
	}
	h.hub = hub
	if k.Bind != "" {
		addr, _ := bindAddr(k.Bind)
		if h.bound, err = net.Listen("tcp", addr); err != nil {
			hub.Close()
			return nil, fmt.Errorf("--kv-events-bind: %w", err)
		}
	}
	registerKVMetrics(set, routing)
	registerKVTierMetrics(set, hub)
	return h, nil
}

// source is what the core matches requests on: nil (the text index) when
// the mode is off.
func (h *kvHub) source() core.KVSource {
	if h == nil {
		return nil
	}
	if kvOracle != nil {
		return kvOracle(h)
	}
	return h.hub
}

// allow is the worker-host policy for an endpoint's or a worker's
// host:port: the replica's dialer resolves the name and checks it, and the
// first allowed address is the one dialed (or the one a bound connection
// must come from), so the events' sockets reach no destination a worker's
// HTTP could not.
func (h *kvHub) allow(hostport string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.dialer.Resolve(ctx, hostport)
}

// hubWorker is what the hub knows of a registered worker: where to dial
// its engine (none when engines dial this tier and the worker names no
// endpoint), its replay socket, its host:port and its topic.
func (h *kvHub) hubWorker(w store.Worker) (kvevents.HubWorker, error) {
	u, err := workerurl.Parse(w.URL)
	if err != nil {
		return kvevents.HubWorker{}, err
	}
	hw := kvevents.HubWorker{ID: uint32(w.ID), Host: u.Addr(), Topic: w.KVEventsTopic}
	ep := w.KVEventsEndpoint
	if ep == "" && h.cfg.Bind == "" {
		if ep, err = store.DefaultKVEventsEndpoint(w.URL); err != nil {
			return hw, err
		}
	}
	hw.Endpoint = ep
	if w.KVEventsReplayEndpoint != "" {
		hw.ReplayEndpoint = w.KVEventsReplayEndpoint
		return hw, nil
	}
	replayBase := ep
	if replayBase == "" {
		replayBase, _ = store.DefaultKVEventsEndpoint(w.URL) // vLLM's replay binds on the engine's host
	}
	if off := h.cfg.replayOffset(); off >= 0 && replayBase != "" {
		host, port, err := net.SplitHostPort(replayBase[len("tcp://"):])
		if err != nil {
			return hw, err
		}
		p, _ := strconv.Atoi(port)
		hw.ReplayEndpoint = "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+off))
	}
	return hw, nil
}

func (k KVEvents) replayOffset() int {
	if k.ReplayOffset == 0 {
		return 1
	}
	return k.ReplayOffset
}

// sync makes the hub know the registry's workers (the prefill workers'
// events are what a P/D prefill finds cached; decode workers are not
// matched, and are not heard).
func (h *kvHub) sync(workers []store.Worker) {
	if h == nil {
		return
	}
	var ws []kvevents.HubWorker
	for _, w := range workers {
		if w.Role == store.RoleDecode {
			continue
		}
		hw, err := h.hubWorker(w)
		if err != nil {
			h.log.Warn("no KV-event endpoint for a worker: it routes on the text index", "worker", w.URL, "err", err)
			continue
		}
		ws = append(ws, hw)
	}
	if err := h.hub.Sync(ws); err != nil {
		h.log.Warn("some workers' KV events cannot be heard: they route on the text index", "err", err)
	}
	h.syncMetrics(h.metrics, workers)
	if h.onSync != nil {
		h.onSync(workers)
	}
}

// listen hands the bound socket to the hub, once: when the registry is the
// cluster's (an engine that dials before is held in its handshake, not
// refused as a stranger: llm-d-inference-sim, for one, never dials again
// after a refusal).
func (h *kvHub) listen() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bound == nil || h.listening {
		return
	}
	h.listening = true
	if err := h.hub.Listen(h.bound); err != nil {
		h.log.Warn("the KV-event bind socket could not listen", "err", err)
		return
	}
	h.log.Info("engines may publish KV events here", "bind", h.bound.Addr().String())
}

// engineRunning hands the hub the engines' latest readings of requests
// running, for the stale judgement of an engine busy and silent.
func (h *kvHub) engineRunning(readings func() map[store.WorkerID]float64) {
	if h == nil {
		return
	}
	for id, running := range readings() {
		h.hub.EngineRunning(uint32(id), int(running))
	}
}

// close closes every subscriber and the bound socket.
func (h *kvHub) close() {
	if h == nil {
		return
	}
	h.hub.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bound != nil && !h.listening {
		h.bound.Close()
	}
}

// stat is worker id's stream in GET /cluster/workers, nil when the mode is
// off.
func (h *kvHub) stat(id store.WorkerID) *adminapi.KVEventsStat {
	if h == nil {
		return nil
	}
	s, _ := h.hub.Status(uint32(id))
	st := s.Stats
	return &adminapi.KVEventsStat{State: s.Trust.String(), Source: s.Source, Blocks: s.Blocks, Bytes: s.Bytes,
		Epoch: s.Epoch, Next: s.Next, Batches: st.Batches, Events: st.Events, Followed: st.Followed,
		Restored: st.Restored, Gaps: st.Gaps, Repaired: st.Repaired, Lost: st.Lost, Rewinds: st.Rewinds,
		Malformed: st.Malformed, PeerResets: st.PeerResets, TopicChanges: st.TopicChanges,
		Unparsable: st.Unparsable, Orphans: st.Orphans, Refused: st.Refused, Violations: s.Violations}
}
