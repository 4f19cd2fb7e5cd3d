package health

import (
	"cmp"
	"slices"
	"time"
)

// VerdictKind is what a replica concluded about a worker from its progress.
type VerdictKind uint8

const (
	// VerdictWedged: requests in flight, no progress for WedgeTimeout.
	VerdictWedged VerdictKind = 1
	// VerdictDegraded: token rate far below the peers' median.
	VerdictDegraded VerdictKind = 2
)

// String returns "wedged" or "degraded".
func (k VerdictKind) String() string {
	switch k {
	case VerdictWedged:
		return "wedged"
	case VerdictDegraded:
		return "degraded"
	}
	return "unknown"
}

func (k VerdictKind) known() bool { return k == VerdictWedged || k == VerdictDegraded }

// Verdict is one replica's judgement that a worker should get no traffic, as
// carried by gossip.
type Verdict struct {
	Worker WorkerID
	Kind   VerdictKind
	Since  time.Time // when the verdict began, on the judging replica's clock
}

func (j *judge) verdicts() []Verdict {
	var out []Verdict
	for _, w := range j.workers.Load().list {
		out = j.appendVerdict(out, w.id, VerdictWedged, w.wedgedAt.Load())
		out = j.appendVerdict(out, w.id, VerdictDegraded, w.degradedAt.Load())
	}
	return out
}

func (j *judge) appendVerdict(out []Verdict, id WorkerID, k VerdictKind, since int64) []Verdict {
	if since == notSet {
		return out
	}
	return append(out, Verdict{Worker: id, Kind: k, Since: j.timeAt(since)})
}

func (j *judge) setRemoteVerdicts(origin string, verdicts []Verdict) {
	j.controlMu.Lock()
	defer j.controlMu.Unlock()
	if len(verdicts) == 0 {
		delete(j.remote, origin)
	} else {
		j.remote[origin] = slices.Clone(verdicts)
	}
	j.applyRemoteLocked()
}

func (j *judge) remoteOrigins() []string {
	j.controlMu.Lock()
	defer j.controlMu.Unlock()
	out := make([]string, 0, len(j.remote))
	for origin := range j.remote {
		out = append(out, origin)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// remoteCount is how many origins hold verdicts against one worker: any,
// and of each kind.
type remoteCount struct{ any, wedged, degraded int32 }

// applyRemoteLocked recounts, per worker, the origins holding a verdict against
// it, and decides again whether they take it out. Caller holds controlMu.
func (j *judge) applyRemoteLocked() {
	counts := make(map[WorkerID]remoteCount)
	for _, verdicts := range j.remote {
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
	live := max(j.liveReplicas(), len(j.remote)+1)
	for _, w := range j.workers.Load().list {
		c := counts[w.id]
		w.mu.Lock()
		ch := changeRemote
		if w.remote.Swap(c.any) == c.any {
			ch = 0
		}
		w.remoteWedged, w.remoteDegraded = c.wedged, c.degraded
		ch |= w.refreshRemote(live)
		w.mu.Unlock()
		j.report(w, ch)
	}
}
