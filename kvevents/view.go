package kvevents

import (
	"sync"
	"time"
)

// ViewConfig is what every view of a hub shares.
type ViewConfig struct {
	// BlockSize is the engines' block size in tokens. Required.
	BlockSize int
	// MaxBlocks bounds each set (default 1<<16).
	MaxBlocks int
	// StaleAfter is how long an engine may have work and publish nothing,
	// and how long a set emptied by a reset is not trusted (default
	// DefaultStaleAfter).
	StaleAfter time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c ViewConfig) withDefaults() ViewConfig {
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = 1 << 16
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// View is one worker's blocks as this replica knows them, and whether they
// may be routed on, whatever told it: this replica's own connection to the
// engine (dialed, or dialed in by the engine), a peer's relay of what that
// peer heard, or a peer's snapshot. Safe for concurrent use.
type View struct {
	cfg ViewConfig

	mu     sync.RWMutex
	stream *Stream
	watch  watch
	gone   evictions
	// relay, when set, hears every batch this replica applies from the
	// engine itself, for the peers (the hub sets it while it hears the
	// engine through its bound socket).
	relay func(Applied)
	// held are the peers' batches that arrived past a gap, kept (within
	// maxHeldBytes) until the snapshot that fills it is restored.
	held      []RelayedBatch
	heldBytes int
	partial   partial
	// wanted says a gap in what the peers relayed waits for a snapshot
	// from wantFrom.
	wanted   bool
	wantFrom string
	// caughtFrom is the batches applied when the last catch-up began.
	caughtFrom uint64
	// topic is the topic of the last live batch.
	topic string
}

// NewView is an empty view that nothing hears yet.
func NewView(cfg ViewConfig) *View {
	cfg = cfg.withDefaults()
	v := &View{cfg: cfg, stream: NewStream(NewSet(cfg.BlockSize, cfg.MaxBlocks))}
	v.stream.OnApplied(v.applied)
	return v
}

// applied passes a batch applied from the engine to the relay; under mu.
func (v *View) applied(a Applied) {
	if v.relay != nil {
		v.relay(a)
	}
}

// Relay makes fn hear every batch this replica applies from the engine
// (nil: none). fn is called under the view's lock and must not keep
// a.Ops past its call.
func (v *View) Relay(fn func(Applied)) {
	v.mu.Lock()
	v.relay = fn
	v.mu.Unlock()
}

// Matched is how many leading blocks of a prompt, given by its keys, the
// engine holds now.
func (v *View) Matched(keys []Key) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.stream.Set().Matched(keys)
}

// EvictedSince reports whether the engine removed any of a prompt's blocks
// (by its keys), or its set was emptied, at or after t: a decision made at
// t whose blocks the set lacks is not waiting for them to be stored.
func (v *View) EvictedSince(keys []Key, t time.Time) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.gone.since(keys, t)
}

// Trust is whether the set may be routed on now.
func (v *View) Trust() Trust {
	now := v.cfg.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.trustLocked(now)
}

// trustLocked judges the view at now: the stream's health, and a gap in
// what the peers relayed, which holds the view Replaying until a snapshot
// fills it (the missed batches may have removed blocks it holds).
func (v *View) trustLocked(now time.Time) Trust {
	t := v.watch.trust(now, v.cfg.StaleAfter)
	if v.wanted && t != Disconnected {
		return Replaying
	}
	return t
}

// Expect says the engine was just given work that should make it store
// blocks: if nothing is heard of it for StaleAfter, the view is Stale.
func (v *View) Expect() {
	now := v.cfg.Now()
	v.mu.Lock()
	v.watch.expect(now)
	v.mu.Unlock()
}

// EngineRunning says what the engine reports it runs (its
// vllm:num_requests_running): an engine that runs requests and publishes
// nothing for StaleAfter is Stale, whoever sent it the requests.
func (v *View) EngineRunning(n int) {
	now := v.cfg.Now()
	v.mu.Lock()
	v.watch.busy(n > 0, now)
	v.mu.Unlock()
}

// ViewStatus is what a view knows of its stream.
type ViewStatus struct {
	Trust  Trust
	Stats  Stats
	Blocks int // the set's size
	Bytes  int // the set's tables
	Epoch  uint32
	Next   uint64
}

// Status is the view's state now.
func (v *View) Status() ViewStatus {
	now := v.cfg.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	set := v.stream.Set()
	epoch, next, _ := v.stream.Position()
	return ViewStatus{Trust: v.trustLocked(now), Stats: v.stream.Stats(), Blocks: set.Len(),
		Bytes: set.Bytes(), Epoch: epoch, Next: next}
}

// noteLocked updates the watch and the evictions log after the stream
// changed; applied says a batch was applied or a gap repaired.
func (v *View) noteLocked(applied bool) {
	now := v.cfg.Now()
	v.watch.note(v.stream.Stats(), now, applied)
	v.gone.note(v.stream.Set(), now)
}

// connected says this replica has a connection to the engine.
func (v *View) connected() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.watch.connected
}

// relayed says a peer's word that it hears the engine is fresh.
func (v *View) relayed() bool {
	now := v.cfg.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return now.Before(v.watch.relayedTo)
}

// position is the stream's (View.Status's Epoch and Next), and whether it
// has heard a batch or taken a snapshot.
func (v *View) position() (epoch uint32, next uint64, started bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.stream.Position()
}
