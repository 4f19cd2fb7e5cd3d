package affinity

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
	"k8s.io/utils/clock"
)

// An engine serving LoRA adapters runs at most max_lora of them in one
// batch (vLLM's --max-loras): a request for another waits, or the engine
// swaps an idle adapter out for it, and swapping costs time. Requests for
// more adapters than that, interleaved on one worker, make it swap back and
// forth. The residency table is what a replica knows of which adapters each
// worker holds in its slots: the tier's requests of each adapter in flight
// there (this replica's own exactly, its peers' as they report), and what
// the engines say they run and queue (vllm:lora_requests_info). Policy on
// it is in adapter_place.go.

// AdapterKey names a LoRA adapter in the table and in the gossip: a hash of
// its name. 0 is no adapter (the base model).
type AdapterKey uint64

// AdapterKeyOf is the key of the adapter named name; 0 for "".
func AdapterKeyOf(name string) AdapterKey {
	if name == "" {
		return 0
	}
	k := AdapterKey(xxh3.HashString("lora\x00" + name))
	if k == 0 {
		k = 1
	}
	return k
}

// MaxAdaptersPerWorker bounds what the table keeps of one worker: the
// adapters seen most recently. An engine holds a few in its slots (vLLM's
// max_loras is 1 by default; a few dozen is large), so sixty-four is
// plenty and keeps a stranger's flood of names from growing the table.
const MaxAdaptersPerWorker = 64

// AdapterSeen is what the tier, this replica's own requests aside, knows of
// one adapter on one worker.
type AdapterSeen struct {
	Key AdapterKey
	// Last is when it was last active there: running or waiting in an
	// engine reading, or a peer's request of it in flight or ended.
	Last time.Time
	// BusyUntil: until then it holds a slot of the engine whatever this
	// replica sends (the engine's reading showed it running or waiting, or
	// a peer has requests of it in flight there).
	BusyUntil time.Time
}

// AdapterView is the tier's view of one worker's adapters, this replica's
// own requests aside. Immutable once handed to SetView.
type AdapterView struct {
	// Slots is the engine's max_lora, how many adapters it runs at once; 0
	// is unknown, and no bound is assumed.
	Slots int
	// Seen lists the adapters, each once, at most MaxAdaptersPerWorker.
	Seen []AdapterSeen
}

// Adapters is one replica's residency table. The request path reads it
// without locks (an immutable view per worker, atomics for this replica's
// own requests); a mutex serialises the creation of entries only.
type Adapters struct {
	clock    clock.PassiveClock
	maxBytes int64
	bytes    atomic.Int64
	mu       sync.Mutex
	workers  atomic.Pointer[map[WorkerID]*adapterWorker]
	heat     heat // recent requests per adapter, for spreading a hot one
}

// adapterWorker is the table's entry of one worker.
type adapterWorker struct {
	view atomic.Pointer[AdapterView]
	uses atomic.Pointer[map[AdapterKey]*adapterUse] // this replica's own; copy on write under Adapters.mu
}

// adapterUse is this replica's own requests of one adapter on one worker.
type adapterUse struct {
	inflight atomic.Int64
	last     atomic.Int64 // unix nanos: routed or ended, the latest
	clock    clock.PassiveClock
}

// The table's cost, for its byte bound: an entry of a worker, one of this
// replica's uses, and one adapter of a view.
const (
	adapterWorkerBytes = 96
	adapterUseBytes    = 80
	adapterSeenBytes   = 56
)

// DefaultAdaptersBytes bounds a table unless told otherwise: 1,024 workers
// with sixty-four adapters each, seen and used, fit.
const DefaultAdaptersBytes = 16 << 20

// NewAdapters returns an empty table that reads time from clk and holds at
// most maxBytes (DefaultAdaptersBytes when not positive): past it a new
// worker or adapter is not tracked, and its requests route as if nothing
// were resident.
func NewAdapters(clk clock.PassiveClock, maxBytes int64) *Adapters {
	if maxBytes <= 0 {
		maxBytes = DefaultAdaptersBytes
	}
	a := &Adapters{clock: clk, maxBytes: maxBytes}
	a.workers.Store(&map[WorkerID]*adapterWorker{})
	return a
}

// Bytes is the table's size by its own accounting.
func (a *Adapters) Bytes() int64 { return a.bytes.Load() }

// worker is w's entry, nil when it has none.
func (a *Adapters) worker(w WorkerID) *adapterWorker { return (*a.workers.Load())[w] }

// ensure is w's entry, made on first use; nil past the byte bound.
func (a *Adapters) ensure(w WorkerID) *adapterWorker {
	if e := a.worker(w); e != nil {
		return e
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *a.workers.Load()
	if e := old[w]; e != nil {
		return e
	}
	if !a.charge(adapterWorkerBytes) {
		return nil
	}
	e := &adapterWorker{}
	e.uses.Store(&map[AdapterKey]*adapterUse{})
	next := maps.Clone(old)
	next[w] = e
	a.workers.Store(&next)
	return e
}

// charge counts n more bytes, unless that would pass the bound.
func (a *Adapters) charge(n int64) bool {
	if a.bytes.Add(n) > a.maxBytes {
		a.bytes.Add(-n)
		return false
	}
	return true
}

// SetView replaces what the tier knows of w's adapters (the core merges
// the engine's readings and the peers' reports into it).
func (a *Adapters) SetView(w WorkerID, v AdapterView) {
	if len(v.Seen) > MaxAdaptersPerWorker {
		v.Seen = v.Seen[:MaxAdaptersPerWorker]
	}
	e := a.ensure(w)
	if e == nil {
		return
	}
	n := int64(len(v.Seen)) * adapterSeenBytes
	if !a.charge(n) {
		return
	}
	if old := e.view.Swap(&v); old != nil {
		a.bytes.Add(-int64(len(old.Seen)) * adapterSeenBytes)
	}
}

// Forget drops w's entry: it left the registry. Guards still held on its
// uses release them as usual.
func (a *Adapters) Forget(w WorkerID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *a.workers.Load()
	e := old[w]
	if e == nil {
		return
	}
	next := maps.Clone(old)
	delete(next, w)
	a.workers.Store(&next)
	freed := int64(adapterWorkerBytes + len(*e.uses.Load())*adapterUseBytes)
	if v := e.view.Load(); v != nil {
		freed += int64(len(v.Seen)) * adapterSeenBytes
	}
	a.bytes.Add(-freed)
}

// OwnUse is this replica's own requests of one adapter on one worker: what
// it reports to its peers.
type OwnUse struct {
	Worker   WorkerID
	Key      AdapterKey
	InFlight int64
	Last     time.Time // routed or ended, the latest; now while in flight
}

// EachOwn calls fn with every use of this replica's own, in no particular
// order.
func (a *Adapters) EachOwn(fn func(OwnUse)) {
	now := a.clock.Now()
	for w, e := range *a.workers.Load() {
		for k, u := range *e.uses.Load() {
			fn(OwnUse{Worker: w, Key: k, InFlight: u.inflight.Load(), Last: u.lastAt(now)})
		}
	}
}

// use is this replica's use of adapter k on w, made on first use; nil past
// the byte bound. Past MaxAdaptersPerWorker uses of w, the one idle the
// longest goes.
func (a *Adapters) use(w WorkerID, k AdapterKey) *adapterUse {
	e := a.ensure(w)
	if e == nil {
		return nil
	}
	if u := (*e.uses.Load())[k]; u != nil {
		return u
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *e.uses.Load()
	if u := old[k]; u != nil {
		return u
	}
	next := maps.Clone(old)
	if len(next) >= MaxAdaptersPerWorker && !dropIdlest(next) {
		return nil // every use is in flight: a stranger's names, most likely
	}
	if len(next) == len(old) && !a.charge(adapterUseBytes) {
		return nil
	}
	u := &adapterUse{clock: a.clock}
	next[k] = u
	e.uses.Store(&next)
	return u
}

// dropIdlest removes the use idle the longest of those not in flight, and
// reports whether there was one.
func dropIdlest(uses map[AdapterKey]*adapterUse) bool {
	var victim AdapterKey
	oldest := int64(-1)
	for k, u := range uses {
		if u.inflight.Load() == 0 && (oldest < 0 || u.last.Load() < oldest) {
			victim, oldest = k, u.last.Load()
		}
	}
	if oldest < 0 {
		return false
	}
	delete(uses, victim)
	return true
}

// acquire counts one more request of the use in flight.
func (u *adapterUse) acquire() {
	u.inflight.Add(1)
	u.last.Store(u.clock.Now().UnixNano())
}

// release takes one back, at its end.
func (u *adapterUse) release() {
	if u.inflight.Add(-1) < 0 {
		u.inflight.Store(0)
	}
	u.last.Store(u.clock.Now().UnixNano())
}

// lastAt is when the use was last active: now while in flight.
func (u *adapterUse) lastAt(now time.Time) time.Time {
	if u.inflight.Load() > 0 {
		return now
	}
	return time.Unix(0, u.last.Load())
}

// route counts a request of adapter k reserved on w: in flight there until
// its guard is released, and in the adapter's heat.
func (a *Adapters) route(w WorkerID, k AdapterKey, g *Guard) {
	a.heat.note(uint64(k), a.clock.Now())
	if u := a.use(w, k); u != nil {
		u.acquire()
		g.adapter = u
	}
}
