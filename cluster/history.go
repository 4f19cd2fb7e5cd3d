package cluster

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
)

// A replica keeps the last minutes of its per-worker figures so that the
// status page, opened during an incident, draws what led to it at once
// instead of starting its charts empty. The samples are what the page
// would have read from /cluster/workers had it been open.

// historyEvery is how often a replica samples: the page's default poll.
const historyEvery = 2 * time.Second

// historySpan is how far back the samples reach: the charts' 5-minute axis.
const historySpan = 5 * time.Minute

// sampleRing keeps the latest samples, at most its capacity: a new one
// overwrites the oldest. Safe for concurrent use.
type sampleRing struct {
	mu   sync.Mutex
	buf  []adminapi.Sample
	next int  // where the next sample goes
	full bool // every slot holds a sample
}

func newSampleRing(capacity int) *sampleRing {
	return &sampleRing{buf: make([]adminapi.Sample, max(capacity, 1))}
}

func (r *sampleRing) add(s adminapi.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

// samples returns the samples held, oldest first.
func (r *sampleRing) samples() []adminapi.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]adminapi.Sample(nil), r.buf[:r.next]...)
	}
	return append(append(make([]adminapi.Sample, 0, len(r.buf)), r.buf[r.next:]...), r.buf[:r.next]...)
}

// sampleOf keeps of stats what the page's charts draw.
func sampleOf(stats adminapi.WorkerStats) adminapi.Sample {
	s := adminapi.Sample{At: stats.At, Workers: make([]adminapi.WorkerSample, 0, len(stats.Workers))}
	for _, w := range stats.Workers {
		s.Workers = append(s.Workers, adminapi.WorkerSample{ID: w.ID, Load: w.Load, Hits: w.Hits, Misses: w.Misses, Tokens: w.Tokens})
	}
	return s
}

// recordHistory samples this replica's worker figures every historyEvery
// until the replica stops.
func (v *adminViews) recordHistory() {
	t := v.clock.NewTicker(historyEvery)
	defer t.Stop()
	for {
		v.history.add(sampleOf(v.workerStats()))
		select {
		case <-v.ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (v *adminViews) historyView() adminapi.History {
	return adminapi.History{Node: v.node, EverySeconds: historyEvery.Seconds(), SpanSeconds: historySpan.Seconds(),
		Samples: v.history.samples()}
}
