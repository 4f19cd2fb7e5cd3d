package admission

import "time"

// DefaultKVFull is Capacity.KVFull when unset: the KV cache usage, a
// share in (0, 1], at which an engine counts as full.
const DefaultKVFull = 0.95

// Reading is what one scrape of a worker's engine found.
type Reading struct {
	Worker  uint32
	At      time.Time // when it was read; a reading is applied once
	Running float64   // vllm:num_requests_running
	Waiting float64   // vllm:num_requests_waiting
	KVUsage float64   // vllm:kv_cache_usage_perc, 0..1
}

// WorkerLoad is what the tier has in flight on a worker, as the load
// table holds it.
type WorkerLoad struct {
	Worker uint32
	// Others is what the other replicas have in flight on it (merged load
	// less this replica's own).
	Others int64
}

// Capacity learns how many requests each worker's engine runs at once from
// what the engines report. An engine with requests waiting runs all it can,
// so what it runs then is its bound, but a request that arrived since the
// engine's last step waits too, for a moment: so a bound is set, or
// lowered, only when two readings in a row show requests waiting while the
// engine runs fewer than the bound (the more it ran of the two), and raised
// at once when an engine runs more. A full KV cache is a bound at once
// where it raises the bound or none is known; with fewer running than the
// bound it lowers it as requests waiting do, on two readings in a row: how
// many sequences fill the KV moves with their lengths from one reading to
// the next, and the replicas of a tier read the engines at different
// moments, so a bound that followed every reading down made their limits
// disagree, and one replica's queue waited while the others admitted. An
// engine at its bound and not queueing for
// ProbeAfter gets one more, so that an engine with more room than it showed
// (a first reading taken at a moment of arrivals, a restart with more
// memory) is found out. An engine never seen full has no known bound. Not
// safe for concurrent use.
type Capacity struct {
	// KVFull is the KV cache usage at or above which an engine counts as
	// full (--saturation-kv-usage, default DefaultKVFull).
	KVFull float64
	// ProbeAfter is how long a bound holds, the engine at it and not
	// queueing, before it is raised by one; default 60 s: the bound comes
	// from two readings of a full engine, so it is rarely short, and each
	// probe may make one request wait at the engine.
	ProbeAfter time.Duration
	workers    map[uint32]*engineBound
}

type engineBound struct {
	seqs    int       // the bound; 0: none known
	at      time.Time // when it was last set or raised
	lastR   time.Time // the latest reading applied
	short   bool      // that reading showed requests waiting below the bound
	shortAt int       // what the engine ran then
}

// Observe applies a reading; a reading older than or as old as the last
// applied for its worker changes nothing.
func (c *Capacity) Observe(r Reading) {
	if c.workers == nil {
		c.workers = map[uint32]*engineBound{}
	}
	b := c.workers[r.Worker]
	if b == nil {
		b = &engineBound{}
		c.workers[r.Worker] = b
	}
	if !r.At.After(b.lastR) {
		return
	}
	b.lastR = r.At
	running := int(r.Running)
	full := r.KVUsage >= c.kvFull()
	short := (r.Waiting > 0 || full) && (running < b.seqs || b.seqs == 0)
	switch {
	case full && running >= b.seqs:
		b.set(max(running, 1), r.At)
	case running > b.seqs && b.seqs > 0:
		b.set(running, r.At)
	case short && b.short:
		b.set(max(running, b.shortAt, 1), r.At)
	case r.Waiting == 0 && b.seqs > 0 && running >= b.seqs && r.At.Sub(b.at) >= c.probeAfter():
		b.set(b.seqs+1, r.At)
	}
	b.short, b.shortAt = short, running
}

func (b *engineBound) set(n int, at time.Time) { b.seqs, b.at = n, at }

func (c *Capacity) kvFull() float64 {
	if c.KVFull <= 0 {
		return DefaultKVFull
	}
	return c.KVFull
}

func (c *Capacity) probeAfter() time.Duration {
	if c.ProbeAfter <= 0 {
		return time.Minute
	}
	return c.ProbeAfter
}

// Of is worker w's bound, and false when none is known.
func (c *Capacity) Of(w uint32) (int, bool) {
	if b := c.workers[w]; b != nil && b.seqs > 0 {
		return b.seqs, true
	}
	return 0, false
}

// Limit is how many requests this replica may have in flight: the sum of
// the workers' bounds less what the other replicas run on them, or -1 when
// some worker has no known bound (it takes whatever comes). Workers not in
// the list are forgotten.
func (c *Capacity) Limit(workers []WorkerLoad) int {
	present := make(map[uint32]bool, len(workers))
	total := 0
	unbounded := len(workers) == 0
	for _, w := range workers {
		present[w.Worker] = true
		n, ok := c.Of(w.Worker)
		if !ok {
			unbounded = true
			continue
		}
		total += max(0, n-int(w.Others))
	}
	for id := range c.workers {
		if !present[id] {
			delete(c.workers, id)
		}
	}
	if unbounded {
		return -1
	}
	return total
}
