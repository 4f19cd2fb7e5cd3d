package affinity

import (
	"sync"
	"sync/atomic"
)

// WorkerID names a worker. Ids are small integers assigned by the registry
// and never reused, so gossip and the index can refer to workers by id.
type WorkerID uint32

// Load holds one worker's counters as this replica sees them. All fields are
// atomics: the request path reads and writes them without locks.
type Load struct {
	id WorkerID
	// local is this replica's exact in-flight count: one per dispatched
	// attempt that has not been released.
	local atomic.Int64
	// remote is the sum of the other live replicas' latest reports.
	remote atomic.Int64
	// processed counts selections, the tie-breaker between equal loads.
	processed atomic.Uint64
	// recent counts this replica's latest reservations, for the peer share.
	recent recentReservations
	// backlog is this replica's prefill backlog on the worker: the
	// uncached prompt bytes of its in-flight requests whose first token
	// has not come (Guard.Prefilled). remoteBacklog is the sum of the
	// other live replicas' latest reports of theirs.
	backlog, remoteBacklog atomic.Int64
}

// selectLoad is the load selection compares: local (as read by the caller)
// plus the peers' reports plus their expected unreported share.
func (l *Load) selectLoad(local int64, v burstView) int64 {
	return local + l.remote.Load() + l.recent.expected(v)
}

// ID returns the worker's id.
func (l *Load) ID() WorkerID { return l.id }

// Local returns this replica's in-flight count for the worker.
func (l *Load) Local() int64 { return l.local.Load() }

// Merged returns the in-flight count across the cluster: own exact count plus
// the peers' latest reports.
func (l *Load) Merged() int64 { return l.local.Load() + l.remote.Load() }

// Backlog returns this replica's prefill backlog on the worker, in bytes of
// uncached prompt text.
func (l *Load) Backlog() int64 { return l.backlog.Load() }

// MergedBacklog returns the prefill backlog across the cluster: own plus
// the peers' latest reports.
func (l *Load) MergedBacklog() int64 { return l.backlog.Load() + l.remoteBacklog.Load() }

// Processed returns how many times this replica selected the worker.
func (l *Load) Processed() uint64 { return l.processed.Load() }

// LoadTable owns the per-worker counters of one replica. Lookups of existing
// workers are lock-free; the mutex only serialises creation.
type LoadTable struct {
	mu    sync.Mutex
	byID  atomic.Pointer[map[WorkerID]*Load]
	under func(WorkerID)
	share atomic.Pointer[peerShare] // nil: no peer share
}

// NewLoadTable returns an empty table. onUnderflow, if not nil, is called when
// a release would have driven a count below zero (a bug elsewhere: the count
// is clamped at zero instead).
func NewLoadTable(onUnderflow func(WorkerID)) *LoadTable {
	t := &LoadTable{under: onUnderflow}
	empty := map[WorkerID]*Load{}
	t.byID.Store(&empty)
	return t
}

// Get returns the counters of worker id, creating them on first use.
func (t *LoadTable) Get(id WorkerID) *Load {
	if l, ok := (*t.byID.Load())[id]; ok {
		return l
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.byID.Load()
	if l, ok := old[id]; ok {
		return l
	}
	next := make(map[WorkerID]*Load, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	l := &Load{id: id}
	next[id] = l
	t.byID.Store(&next)
	return l
}

// Lookup returns the counters of id, or nil when the worker was never seen.
func (t *LoadTable) Lookup(id WorkerID) *Load { return (*t.byID.Load())[id] }

// SetRemote records the sum of the peers' in-flight counts for worker id,
// when the table has it: what peers say never adds a worker.
func (t *LoadTable) SetRemote(id WorkerID, n int64) {
	if l := t.Lookup(id); l != nil {
		l.remote.Store(n)
	}
}

// Remove drops worker id from the table: it left the registry. Guards
// still held on its counters release them as usual.
func (t *LoadTable) Remove(id WorkerID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.byID.Load()
	if _, ok := old[id]; !ok {
		return
	}
	next := make(map[WorkerID]*Load, len(old))
	for k, v := range old {
		if k != id {
			next[k] = v
		}
	}
	t.byID.Store(&next)
}

// Len is the number of workers in the table.
func (t *LoadTable) Len() int { return len(*t.byID.Load()) }

// SetRemote records the sum of the peers' in-flight counts.
func (l *Load) SetRemote(n int64) { l.remote.Store(n) }

// SetRemoteBacklog records the sum of the peers' prefill backlogs.
func (l *Load) SetRemoteBacklog(n int64) { l.remoteBacklog.Store(n) }

// Each calls fn for every known worker, in no particular order.
func (t *LoadTable) Each(fn func(*Load)) {
	for _, l := range *t.byID.Load() {
		fn(l)
	}
}

// Acquire counts one more in-flight request on l and returns the guard that
// takes it back. Use it where no selection happened (a fixed worker).
func (t *LoadTable) Acquire(l *Load) *Guard {
	l.local.Add(1)
	return &Guard{load: l, table: t}
}

// reserve increments l's local count from seen to seen+1, failing when another
// request changed it in between. seen < 0 reserves unconditionally.
func (t *LoadTable) reserve(l *Load, seen int64) (*Guard, bool) {
	if seen < 0 {
		return t.Acquire(l), true
	}
	if !l.local.CompareAndSwap(seen, seen+1) {
		return nil, false
	}
	return &Guard{load: l, table: t}, true
}

// Guard is one in-flight request on one worker. Release takes it back exactly
// once, however many paths call it; the request's prefill backlog goes at
// the first of Prefilled and Release.
type Guard struct {
	load     *Load
	table    *LoadTable
	released atomic.Bool
	// backlog is the bytes charged on load.backlog (chargeBacklog), until
	// prefilled.
	backlog   int64
	prefilled atomic.Bool
	// adapter is the request's use of its LoRA adapter on the worker, nil
	// for a base model's request: in flight there until released.
	adapter *adapterUse
}

// Worker returns the id of the worker the guard counts on.
func (g *Guard) Worker() WorkerID { return g.load.id }

// chargeBacklog counts the request's uncached prompt bytes in its worker's
// prefill backlog. The router calls it once, before handing the guard out.
func (g *Guard) chargeBacklog(n int64) {
	if n > 0 {
		g.backlog = n
		g.load.backlog.Add(n)
	}
}

// Prefilled takes the request's prefill backlog back, once: its first
// token came, so the engine no longer has its prompt to compute. Release
// does it too, for a request that ends without one.
func (g *Guard) Prefilled() {
	if g == nil || g.backlog == 0 || !g.prefilled.CompareAndSwap(false, true) {
		return
	}
	g.load.backlog.Add(-g.backlog)
}

// Release decrements the in-flight count, once; later calls do nothing. It
// reports whether this call released the guard.
func (g *Guard) Release() bool {
	if g == nil || !g.released.CompareAndSwap(false, true) {
		return false
	}
	g.Prefilled()
	if g.adapter != nil {
		g.adapter.release()
	}
	if g.load.local.Add(-1) < 0 {
		g.clampAtZero()
	}
	return true
}

func (g *Guard) clampAtZero() {
	for {
		n := g.load.local.Load()
		if n >= 0 || g.load.local.CompareAndSwap(n, 0) {
			break
		}
	}
	if g.table != nil && g.table.under != nil {
		g.table.under(g.load.id)
	}
}
