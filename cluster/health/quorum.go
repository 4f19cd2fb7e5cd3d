package health

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// Other replicas' verdicts are heard by gossip, from the outside: one replica
// alone (a stalled one, a buggy one, a stranger) must not be able to take a
// worker away from the whole tier. A remote verdict takes a worker out here
// only when a quorum of the live replicas holds one against it, or when this
// replica's own evidence agrees: its own attempts on the worker have been
// silent for half of WedgeTimeout (for a wedge verdict), or its own rate
// samples, too few for a verdict of its own, put the worker below its peers
// (for a degrade verdict).

// quorum is the number of replicas, out of live, whose verdicts take a worker
// out: more than half, or all of them when there are fewer than three. live
// counts this replica, and is never fewer than the origins holding verdicts
// and this replica (remoteVerdicts.applyLocked), so a verdict heard before the
// gossip's count caught up is not a quorum alone.
func quorum(live int) int {
	if live < 3 {
		return max(live, 1)
	}
	return live/2 + 1
}

// remoteVerdicts are the other replicas' verdicts, by origin, and the count
// of live replicas their quorum is taken of: what decides whether a remote
// verdict takes a worker out here. workers and report are the judge's.
type remoteVerdicts struct {
	workers *atomic.Pointer[workerSet]
	report  func(w *worker, ch change)
	live    atomic.Int32 // live replicas, this one included (setLive)

	// mu serialises control-plane writers: the judge's setWorkers (through
	// swapWorkers) and remote verdicts. The request path and Tick never
	// take it.
	mu       sync.Mutex
	byOrigin map[string][]Verdict // origin -> its latest verdicts
}

func newRemoteVerdicts(workers *atomic.Pointer[workerSet], report func(*worker, change)) *remoteVerdicts {
	r := &remoteVerdicts{workers: workers, report: report, byOrigin: make(map[string][]Verdict)}
	r.live.Store(1)
	return r
}

func (r *remoteVerdicts) setLive(n int) {
	n = max(n, 1)
	if int(r.live.Swap(int32(n))) == n {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyLocked()
}

// liveReplicas is the number last given to SetLiveReplicas, or 1.
func (r *remoteVerdicts) liveReplicas() int { return int(r.live.Load()) }

// swapWorkers replaces the watched workers with what next makes of the
// current set, and decides the remote verdicts again against them,
// serialised with the other control-plane writers.
func (r *remoteVerdicts) swapWorkers(next func(old *workerSet) *workerSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.workers.Store(next(r.workers.Load()))
	r.applyLocked()
}

func (r *remoteVerdicts) set(origin string, verdicts []Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(verdicts) == 0 {
		delete(r.byOrigin, origin)
	} else {
		r.byOrigin[origin] = slices.Clone(verdicts)
	}
	r.applyLocked()
}

func (r *remoteVerdicts) origins() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.byOrigin))
	for origin := range r.byOrigin {
		out = append(out, origin)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// remoteCount is how many origins hold verdicts against one worker: any,
// and of each kind.
type remoteCount struct{ any, wedged, degraded int32 }

// applyLocked recounts, per worker, the origins holding a verdict against
// it, and decides again whether they take it out. Caller holds mu.
func (r *remoteVerdicts) applyLocked() {
	counts := make(map[WorkerID]remoteCount)
	for _, verdicts := range r.byOrigin {
		named := make(map[WorkerID]VerdictKind, len(verdicts))
		for _, v := range verdicts {
			if v.Kind.known() {
				named[v.Worker] |= v.Kind
			}
		}
		for id, kinds := range named {
			c := counts[id]
			c.any++
			c.wedged += int32(kinds & VerdictWedged)
			c.degraded += int32(kinds&VerdictDegraded) >> 1
			counts[id] = c
		}
	}
	// Every origin holding verdicts is live (they are forgotten when it
	// leaves or dies), and so is this replica: a verdict heard before the
	// gossip's count of live replicas caught up is never a quorum alone.
	live := max(r.liveReplicas(), len(r.byOrigin)+1)
	for _, w := range r.workers.Load().list {
		c := counts[w.id]
		w.mu.Lock()
		ch := changeRemote
		if w.remote.Swap(c.any) == c.any {
			ch = 0
		}
		w.remoteWedged, w.remoteDegraded = c.wedged, c.degraded
		ch |= w.refreshRemote(live)
		w.mu.Unlock()
		r.report(w, ch)
	}
}

// refreshRemote decides whether the remote verdicts against w take it out
// here. Caller holds mu.
func (w *worker) refreshRemote(live int) change {
	reporters := int(w.remote.Load())
	out := reporters > 0 && (reporters >= quorum(live) ||
		w.remoteWedged > 0 && w.suspectWedged ||
		w.remoteDegraded > 0 && w.suspectSlow)
	if w.remoteOut.Swap(out) != out {
		return changeRemote
	}
	return 0
}
