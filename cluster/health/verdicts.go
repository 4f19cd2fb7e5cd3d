package health

import "time"

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
