package loadsync

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// originLoad is what one peer replica last told us about its load.
type originLoad struct {
	epoch, seq uint64           // the newest report merged, full or delta
	loads      map[uint32]int64 // non-zero counts only
	// base is the newest full report heard, as far as its packets
	// arrived: deltas are taken against it. covered is the width of the
	// worker-id ranges of its packets merged so far (the whole id space,
	// 1<<32, once complete), ranges their lower bounds.
	baseSeq uint64
	base    map[uint32]int64
	covered uint64
	ranges  []uint32
	// overlay is the workers whose count in loads came from a delta
	// rather than base: the next exact delta resets those it omits.
	overlay []uint32
	// exactAt is the send time (unix ns) of the newest report through
	// which loads equals the origin's counts, exactSeq its number; zero
	// while not exact. A step on exactSeq keeps the view exact.
	exactAt   int64
	exactSeq  uint64
	lastHeard time.Time // our clock, at the last accepted packet
	lastLag   time.Duration
	// gone marks an origin memberlist reported as left or dead. Its loads
	// are cleared; the entry stays until LoadTTL only so that its late
	// packets are recognised as old and not counted again.
	gone bool
}

func newOriginLoad(epoch uint64) *originLoad {
	return &originLoad{epoch: epoch, loads: make(map[uint32]int64), base: make(map[uint32]int64)}
}

func (o *originLoad) baseComplete() bool { return o.covered == 1<<32 }

// loadView merges the peers' reports into per-worker remote sums. It is not
// safe for concurrent use; peerView guards it with its mu.
type loadView struct {
	ttl      time.Duration
	origins  map[string]*originLoad
	remote   map[uint32]int64 // sum over live origins, non-zero only
	onChange func(worker uint32, remote int64)
}

func newLoadView(ttl time.Duration, onChange func(uint32, int64)) loadView {
	return loadView{
		ttl:      ttl,
		origins:  make(map[string]*originLoad),
		remote:   make(map[uint32]int64),
		onChange: onChange,
	}
}

// admit finds or makes the entry of origin for a report of epoch, or
// returns nil when the report is of an older epoch. A newer epoch is a
// restarted origin: its old counts mean nothing now.
func (v *loadView) admit(origin string, epoch uint64) *originLoad {
	o := v.origins[origin]
	switch {
	case o == nil:
		o = newOriginLoad(epoch)
		v.origins[origin] = o
	case epoch > o.epoch:
		v.clear(o)
		*o = *newOriginLoad(epoch)
	case epoch < o.epoch:
		return nil
	}
	return o
}

func (o *originLoad) heard(now time.Time, sentAt int64) {
	o.gone = false
	o.lastHeard = now
	o.lastLag = now.Sub(time.Unix(0, sentAt))
}

// apply merges one packet of a full report and reports whether it was news:
// newer than what is held for its origin, or another range of the newest
// report.
func (v *loadView) apply(rep *loadReport, now time.Time) bool {
	o := v.admit(rep.origin, rep.epoch)
	if o == nil || rep.seq < o.baseSeq || o.gone && rep.seq <= o.seq || !o.newRange(rep) {
		return false // older, a copy, or a late copy of what it sent before it left
	}
	for w := range o.base {
		if w >= rep.lo && w <= rep.hi {
			delete(o.base, w)
		}
	}
	for _, e := range rep.entries {
		o.base[e.Worker] = e.InFlight
	}
	o.heard(now, rep.sentAt)
	late := rep.seq < o.seq
	v.applyRange(o, rep, late)
	if !late {
		o.seq = rep.seq
		if o.baseComplete() {
			o.exactAt, o.exactSeq = rep.sentAt, rep.seq
		}
	}
	return true
}

// maxReportRanges bounds the packets one full report is merged from: a
// report of a million workers takes a few thousand, so more can only be
// made up, and each one would grow the origin's state.
const maxReportRanges = 4096

// newRange records rep's range as part of the newest full report, starting
// a new base when rep is newer, and reports false for a copy of a range
// already merged.
func (o *originLoad) newRange(rep *loadReport) bool {
	if rep.seq > o.baseSeq {
		o.baseSeq, o.covered, o.ranges = rep.seq, 0, o.ranges[:0]
		clear(o.base)
	}
	if len(o.ranges) >= maxReportRanges || slices.Contains(o.ranges, rep.lo) {
		return false
	}
	o.ranges = append(o.ranges, rep.lo)
	o.covered += uint64(rep.hi) - uint64(rep.lo) + 1
	return true
}

// applyRange makes o's counts within [rep.lo, rep.hi] equal to rep's. A
// late report (deltas sent after it were merged first) leaves the counts
// those deltas set, which are newer, and only replaces the rest, so that
// loads is again its base overlaid by deltas.
func (v *loadView) applyRange(o *originLoad, rep *loadReport, late bool) {
	keep := func(w uint32) bool {
		_, found := slices.BinarySearch(o.overlay, w)
		return late && found
	}
	for w := range o.loads {
		if w < rep.lo || w > rep.hi || keep(w) {
			continue
		}
		if _, found := slices.BinarySearchFunc(rep.entries, w, byWorker); !found {
			v.set(o, w, 0)
		}
	}
	for _, e := range rep.entries {
		if !keep(e.Worker) {
			v.set(o, e.Worker, e.InFlight)
		}
	}
	if !late {
		o.overlay = slices.DeleteFunc(o.overlay, func(w uint32) bool { return w >= rep.lo && w <= rep.hi })
	}
}

// deltaOutcome says how a delta report was merged.
type deltaOutcome int

const (
	deltaStale   deltaOutcome = iota // older than what is held: ignored
	deltaExact                       // merged onto its base: the view is exact
	deltaInexact                     // its base is missing: its counts merged, the view inexact
)

// applyDelta merges a delta report. Onto its complete base the view
// becomes exactly the origin's counts at d.seq. Without it (the full
// report was lost, is late, or predates our hearing of the origin) the
// delta's counts are still the newest known for its workers and are
// merged, but the other workers keep what they had until the next full
// report.
func (v *loadView) applyDelta(d *loadDelta, now time.Time) deltaOutcome {
	o := v.admit(d.origin, d.epoch)
	if o == nil || d.seq <= o.seq {
		return deltaStale
	}
	o.seq = d.seq
	revived := o.gone
	o.heard(now, d.sentAt)
	if d.base != o.baseSeq || !o.baseComplete() {
		for _, e := range d.entries {
			v.set(o, e.Worker, e.InFlight)
			o.overlay = append(o.overlay, e.Worker)
		}
		o.overlay = slices.Compact(slices.Sorted(slices.Values(o.overlay)))
		o.exactSeq = 0
		return deltaInexact
	}
	if revived {
		// Forget cleared the counts but kept the base they rest on.
		for w, n := range o.base {
			v.set(o, w, n)
		}
	}
	for _, w := range o.overlay {
		if _, found := slices.BinarySearchFunc(d.entries, w, byWorker); !found {
			v.set(o, w, o.base[w])
		}
	}
	o.overlay = o.overlay[:0]
	for _, e := range d.entries {
		v.set(o, e.Worker, e.InFlight)
		o.overlay = append(o.overlay, e.Worker)
	}
	o.exactAt, o.exactSeq = d.sentAt, d.seq
	return deltaExact
}

// applyStep merges a step: the counts of the workers that changed since
// the report numbered d.base. Onto a view exact at d.base it is exact at
// d.seq; otherwise (a step was lost or is late, or the view was never
// exact) its counts are still the newest known for its workers and are
// merged, and the view stays inexact until the next cumulative delta or
// full report. Its workers join the overlay, so that the next cumulative
// delta resets those it omits to the base.
func (v *loadView) applyStep(d *loadDelta, now time.Time) deltaOutcome {
	o := v.admit(d.origin, d.epoch)
	if o == nil || d.seq <= o.seq {
		return deltaStale
	}
	exact := !o.gone && o.exactSeq != 0 && o.exactSeq == d.base && o.seq == d.base
	o.seq = d.seq
	o.heard(now, d.sentAt)
	for _, e := range d.entries {
		v.set(o, e.Worker, e.InFlight)
		o.overlay = append(o.overlay, e.Worker)
	}
	o.overlay = slices.Compact(slices.Sorted(slices.Values(o.overlay)))
	if !exact {
		o.exactSeq = 0
		return deltaInexact
	}
	o.exactAt, o.exactSeq = d.sentAt, d.seq
	return deltaExact
}

// lag is how old, at now, the newest state of origin is that our view of it
// equals, and whether it ever was exact.
func (v *loadView) lag(origin string, now time.Time) (time.Duration, bool) {
	o := v.origins[origin]
	if o == nil || o.exactAt == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, o.exactAt)), true
}

func byWorker(l WorkerLoad, w uint32) int { return cmp.Compare(l.Worker, w) }

// set changes origin o's count of worker w and keeps the remote sum in step.
func (v *loadView) set(o *originLoad, w uint32, n int64) {
	old := o.loads[w]
	if old == n {
		return
	}
	if n == 0 {
		delete(o.loads, w)
	} else {
		o.loads[w] = n
	}
	sum := v.remote[w] + n - old
	if sum == 0 {
		delete(v.remote, w)
	} else {
		v.remote[w] = sum
	}
	if v.onChange != nil {
		v.onChange(w, sum)
	}
}

// clear drops o's contribution and forgets its base, so that nothing
// merged later is taken against counts the view no longer holds.
func (v *loadView) clear(o *originLoad) {
	v.clearLoads(o)
	clear(o.base)
	o.covered, o.ranges = 0, o.ranges[:0]
}

// clearLoads drops o's contribution to the sums. Its base stays: a delta
// on that base brings the counts back exactly.
func (v *loadView) clearLoads(o *originLoad) {
	for w := range o.loads {
		v.set(o, w, 0)
	}
	o.overlay, o.exactAt, o.exactSeq = o.overlay[:0], 0, 0
}

// forget drops origin's contribution at once.
func (v *loadView) forget(origin string) {
	if o := v.origins[origin]; o != nil {
		v.clearLoads(o)
		o.gone = true
	}
}

// expire drops every origin not heard from for longer than the TTL.
func (v *loadView) expire(now time.Time) {
	for name, o := range v.origins {
		if now.Sub(o.lastHeard) > v.ttl {
			v.clear(o)
			delete(v.origins, name)
		}
	}
}

// OriginStatus describes one peer replica's load reports, for status pages
// and freshness metrics.
type OriginStatus struct {
	Origin    string
	BootEpoch uint64
	Seq       uint64
	// Age is how long ago, by the caller's clock, its last report arrived.
	Age time.Duration
	// LastLag is receive time minus send time of that report.
	LastLag time.Duration
	// Workers is how many workers it reported as busy.
	Workers int
}

func (v *loadView) status(now time.Time) []OriginStatus {
	out := make([]OriginStatus, 0, len(v.origins))
	for name, o := range v.origins {
		if o.gone {
			continue
		}
		out = append(out, OriginStatus{
			Origin: name, BootEpoch: o.epoch, Seq: o.seq,
			Age: now.Sub(o.lastHeard), LastLag: o.lastLag, Workers: len(o.loads),
		})
	}
	slices.SortFunc(out, func(a, b OriginStatus) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}
