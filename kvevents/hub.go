package kvevents

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// HubWorker is one worker a Hub hears: its id and its engine's sockets.
type HubWorker struct {
	ID uint32
	// Endpoint is the engine's PUB socket, tcp://host:port.
	Endpoint string
	// ReplayEndpoint is its replay socket, "" for none.
	ReplayEndpoint string
}

// HubConfig is what every subscriber of a Hub shares.
type HubConfig struct {
	// BlockSize is the engines' block size in tokens (vLLM's default is
	// 16). Required.
	BlockSize int
	// MaxBlocks bounds each worker's set (default 1<<16).
	MaxBlocks int
	// Allow is the worker-host policy (SubscriberConfig.Allow). Required.
	Allow func(hostport string) (string, error)
	// StaleAfter, Now, Retry and ReplayTimeout: SubscriberConfig's.
	StaleAfter    time.Duration
	Now           func() time.Time
	Retry         time.Duration
	ReplayTimeout time.Duration
}

// Hub keeps one Subscriber per worker as the registry changes. Every set is
// keyed from Seed(""): a set holds one engine's blocks, so the keys of a
// request are computed once (Keys) and asked of every worker.
//
// Concurrency: Sync and Close are serialised by the caller (the registry's
// follower); Matched, Expect and Status may be called from any goroutine and
// read an immutable map swapped by Sync.
type Hub struct {
	cfg  HubConfig
	subs atomic.Pointer[map[uint32]*hubEntry]
	mu   sync.Mutex // serialises Sync and Close
}

type hubEntry struct {
	worker HubWorker
	sub    *Subscriber
}

// NewHub is a hub hearing no worker yet.
func NewHub(cfg HubConfig) (*Hub, error) {
	if cfg.Allow == nil || cfg.BlockSize < 1 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("kvevents: a hub needs a host policy and a block size in 1..%d", MaxBlockSize)
	}
	if cfg.MaxBlocks <= 0 {
		cfg.MaxBlocks = 1 << 16
	}
	h := &Hub{cfg: cfg}
	h.subs.Store(&map[uint32]*hubEntry{})
	return h, nil
}

// BlockSize is the engines' block size in tokens.
func (h *Hub) BlockSize() int { return h.cfg.BlockSize }

// Keys appends the keys of tokens' full blocks, as every set of the hub
// keys them.
func (h *Hub) Keys(dst []uint64, tokens []uint32) []uint64 {
	return AppendKeys(dst, Seed(""), tokens, h.cfg.BlockSize)
}

// Sync makes ws the workers heard: a new worker, or one whose endpoints
// changed, gets a subscriber (its endpoints past the policy first); a worker
// gone loses its own. An endpoint the policy refuses is in the error, and
// that worker is not heard (its requests route on the text index).
func (h *Hub) Sync(ws []HubWorker) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.subs.Load()
	next := make(map[uint32]*hubEntry, len(ws))
	var errs []error
	for _, w := range ws {
		if e, ok := old[w.ID]; ok && e.worker == w {
			next[w.ID] = e
			continue
		}
		sub, err := Subscribe(SubscriberConfig{Endpoint: w.Endpoint, ReplayEndpoint: w.ReplayEndpoint,
			BlockSize: h.cfg.BlockSize, MaxBlocks: h.cfg.MaxBlocks, Allow: h.cfg.Allow, StaleAfter: h.cfg.StaleAfter,
			Now: h.cfg.Now, Retry: h.cfg.Retry, ReplayTimeout: h.cfg.ReplayTimeout})
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", w.ID, err))
			continue
		}
		next[w.ID] = &hubEntry{worker: w, sub: sub}
	}
	h.subs.Store(&next)
	for id, e := range old {
		if n, ok := next[id]; !ok || n != e {
			e.sub.Close()
		}
	}
	return errors.Join(errs...)
}

// Close stops every subscriber and waits for them.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range *h.subs.Swap(&map[uint32]*hubEntry{}) {
		e.sub.Close()
	}
}

// Matched is how many leading blocks of a prompt (by its Keys) worker id's
// engine holds now, and whether its set may be routed on. A worker the hub
// does not hear is Disconnected.
func (h *Hub) Matched(id uint32, keys []uint64) (int, Trust) {
	e, ok := (*h.subs.Load())[id]
	if !ok {
		return 0, Disconnected
	}
	if t := e.sub.Trust(); t != Trusted {
		return 0, t
	}
	return e.sub.MatchedKeys(keys), Trusted
}

// EvictedSince reports whether worker id's engine removed any of keys, or
// its set was emptied, at or after t (Subscriber.EvictedSince); true for a
// worker the hub does not hear.
func (h *Hub) EvictedSince(id uint32, keys []uint64, t time.Time) bool {
	e, ok := (*h.subs.Load())[id]
	return !ok || e.sub.EvictedSince(keys, t)
}

// Expect says worker id was just given work that should store blocks
// (Subscriber.Expect).
func (h *Hub) Expect(id uint32) {
	if e, ok := (*h.subs.Load())[id]; ok {
		e.sub.Expect()
	}
}

// WorkerStatus is what the hub knows of one worker's stream.
type WorkerStatus struct {
	Trust  Trust
	Stats  Stats
	Blocks int // the set's size
}

// Status is worker id's stream; ok is false for a worker the hub does not
// hear.
func (h *Hub) Status(id uint32) (WorkerStatus, bool) {
	e, ok := (*h.subs.Load())[id]
	if !ok {
		return WorkerStatus{Trust: Disconnected}, false
	}
	st, n := e.sub.Stats()
	return WorkerStatus{Trust: e.sub.Trust(), Stats: st, Blocks: n}, true
}

// Each calls fn with every worker heard and its status.
func (h *Hub) Each(fn func(id uint32, s WorkerStatus)) {
	for id := range *h.subs.Load() {
		s, _ := h.Status(id)
		fn(id, s)
	}
}
