package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/store"
)

// KVEvents configures routing on the engines' KV events (--kv-events): each
// replica subscribes to every worker's KV-event endpoint (the registry's
// kv_events_endpoint, else the worker's host on port 5557) and matches
// requests that carry their tokens on what each engine holds now. Zero
// fields take the defaults in their comments.
type KVEvents struct {
	// Enabled turns the mode on; off, nothing here is used.
	Enabled bool
	// BlockSize is the engines' block size in tokens
	// (--kv-events-block-size, default 16, vLLM's).
	BlockSize int
	// MaxBlocks bounds each worker's set of blocks (--kv-events-max-blocks,
	// default 65536).
	MaxBlocks int
	// ReplayOffset is the replay socket's port minus the event socket's
	// (--kv-events-replay-offset, default 1: vLLM's 5557 and 5558); negative
	// means the engines have no replay socket, and every gap empties a set.
	ReplayOffset int
	// StaleAfter is how long an engine given work may publish nothing before
	// its stream is stale, and how long a set emptied by a reset is not
	// trusted (--kv-events-stale-after, default 10 s).
	StaleAfter time.Duration
	// Reservation is how long a decision's blocks count as the worker's
	// before its events show them (--kv-events-reservation, default 2 s).
	Reservation time.Duration
}

// DefaultKVEvents is the mode's settings when no flag is given: off, with
// vLLM's block size and sockets.
func DefaultKVEvents() KVEvents {
	return KVEvents{BlockSize: 16, MaxBlocks: 1 << 16, ReplayOffset: 1, StaleAfter: 10 * time.Second,
		Reservation: 2 * time.Second}
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
	}
	return nil
}

// kvHub is the replica's side of the KV events: the hub of subscribers and
// the per-worker metric series it registered. A nil *kvHub is the mode off:
// each method then does nothing.
type kvHub struct {
	hub     *kvevents.Hub
	cfg     KVEvents
	metrics *metrics.Set
	log     *slog.Logger
	mu      sync.Mutex // guards names
	names   map[store.WorkerID][]string
	dialer  *workerurl.Dialer // resolves and checks every endpoint before it is dialed
	// onSync, when set, also hears the registry's workers (the
	// benchmark's oracle, kvevents_oracle.go).
	onSync func([]store.Worker)
}

// kvOracle replaces the source the core matches on; nil but in a build
// with the kvoracle tag (kvevents_oracle.go), which only the benchmark
// makes.
var kvOracle func(*kvHub) core.KVSource

// newKVHub builds the hub when the mode is on, and registers the mode's
// replica-wide families, read from the core that routing returns; off, it
// is nil (the text index alone).
func newKVHub(k KVEvents, dialer *workerurl.Dialer, set *metrics.Set, log *slog.Logger,
	routing func() *core.Replica) (*kvHub, error) {
	if !k.Enabled {
		return nil, nil
	}
	if k.BlockSize == 0 {
		k.BlockSize = 16
	}
	h := &kvHub{cfg: k, metrics: set, log: log, names: map[store.WorkerID][]string{}, dialer: dialer}
	hub, err := kvevents.NewHub(kvevents.HubConfig{BlockSize: k.BlockSize, MaxBlocks: k.MaxBlocks,
		Allow: h.allow, StaleAfter: k.StaleAfter})
	if err != nil {
		return nil, err
	}
	h.hub = hub
	registerKVMetrics(set, routing)
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

// allow is the worker-host policy for an event endpoint's host:port: the
// replica's dialer resolves the name and checks it, and the first allowed
// address is the one dialed, so the events' sockets reach no destination a
// worker's HTTP could not.
func (h *kvHub) allow(hostport string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.dialer.Resolve(ctx, hostport)
}

// endpoints are a worker's event and replay sockets.
func (h *kvHub) endpoints(w store.Worker) (kvevents.HubWorker, error) {
	ep := w.KVEventsEndpoint
	if ep == "" {
		var err error
		if ep, err = store.DefaultKVEventsEndpoint(w.URL); err != nil {
			return kvevents.HubWorker{}, err
		}
	}
	hw := kvevents.HubWorker{ID: uint32(w.ID), Endpoint: ep}
	if off := h.cfg.replayOffset(); off >= 0 {
		host, port, err := net.SplitHostPort(ep[len("tcp://"):])
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

// syncKVEvents makes the hub hear the registry's workers (the prefill
// workers' events are what a P/D prefill finds cached; decode workers are
// not matched, and are not heard).
func (h *kvHub) sync(workers []store.Worker) {
	if h == nil {
		return
	}
	var ws []kvevents.HubWorker
	for _, w := range workers {
		if w.Role == store.RoleDecode {
			continue
		}
		hw, err := h.endpoints(w)
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

// close closes every subscriber.
func (h *kvHub) close() {
	if h != nil {
		h.hub.Close()
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
	return &adminapi.KVEventsStat{State: s.Trust.String(), Blocks: s.Blocks, Batches: st.Batches, Events: st.Events,
		Gaps: st.Gaps, Repaired: st.Repaired, Lost: st.Lost, Rewinds: st.Rewinds, Malformed: st.Malformed,
		Orphans: st.Orphans, Refused: st.Refused}
}

// syncMetrics registers the series of new workers and drops those of
// workers gone.
func (h *kvHub) syncMetrics(set *metrics.Set, workers []store.Worker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := map[store.WorkerID]bool{}
	for _, w := range workers {
		keep[w.ID] = true
		if _, ok := h.names[w.ID]; ok {
			continue
		}
		h.names[w.ID] = h.registerWorker(set, w)
	}
	for id, names := range h.names {
		if !keep[id] {
			for _, name := range names {
				set.UnregisterMetric(name)
			}
			delete(h.names, id)
		}
	}
}

func (h *kvHub) registerWorker(set *metrics.Set, w store.Worker) []string {
	id := uint32(w.ID)
	status := func() kvevents.WorkerStatus { s, _ := h.hub.Status(id); return s }
	var names []string
	gauge := func(name string, f func() float64) {
		set.GetOrCreateGauge(name, f)
		names = append(names, name)
	}
	for _, t := range kvevents.Trusts {
		gauge(fmt.Sprintf(`vllm_router_kv_events_stream{worker=%q,state=%q}`, w.URL, t),
			func() float64 { return boolGauge(status().Trust == t) })
	}
	gauge(fmt.Sprintf(`vllm_router_kv_events_blocks{worker=%q}`, w.URL), func() float64 { return float64(status().Blocks) })
	for cause, f := range map[string]func(kvevents.Stats) uint64{
		"lost": func(s kvevents.Stats) uint64 { return s.Lost }, "rewind": func(s kvevents.Stats) uint64 { return s.Rewinds },
		"malformed": func(s kvevents.Stats) uint64 { return s.Malformed },
	} {
		gauge(fmt.Sprintf(`vllm_router_kv_events_resets{worker=%q,cause=%q}`, w.URL, cause),
			func() float64 { return float64(f(status().Stats)) })
	}
	gauge(fmt.Sprintf(`vllm_router_kv_events_batches{worker=%q}`, w.URL), func() float64 { return float64(status().Stats.Batches) })
	return names
}

// registerKVMetrics registers the replica-wide families of the mode, read
// from the core routing returns (nil until it is built).
func registerKVMetrics(set *metrics.Set, routing func() *core.Replica) {
	for on, f := range map[string]func(core.KVRouting) uint64{
		"events":   func(k core.KVRouting) uint64 { return k.OnEvents },
		"text":     func(k core.KVRouting) uint64 { return k.OnText },
		"reserved": func(k core.KVRouting) uint64 { return k.Reserved },
	} {
		set.GetOrCreateGauge(fmt.Sprintf(`vllm_router_kv_matched_candidates{on=%q}`, on), func() float64 {
			c := routing()
			if c == nil {
				return 0
			}
			return float64(f(c.KVRouting()))
		})
	}
	set.GetOrCreateGauge("vllm_router_kv_routed_requests", func() float64 {
		c := routing()
		if c == nil {
			return 0
		}
		return float64(c.KVRouting().Requests)
	})
}
