package loadsync

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// originLoad is what one peer replica last told us about its load.
type originLoad struct {
	epoch, seq uint64
	loads      map[uint32]int64 // non-zero counts only
	lastHeard  time.Time        // our clock, at the last accepted packet
	lastLag    time.Duration
	// gone marks an origin memberlist reported as left or dead. Its loads
	// are cleared; the entry stays until LoadTTL only so that its late
	// packets are recognised as old and not counted again.
	gone bool
}

// loadView merges the peers' reports into per-worker remote sums. It is not
// safe for concurrent use; State guards it with loadMu.
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

// apply merges one report packet and reports whether it was newer than or
// part of the newest report held for its origin.
func (v *loadView) apply(rep *loadReport, now time.Time) bool {
	o := v.origins[rep.origin]
	switch {
	case o == nil:
		o = &originLoad{epoch: rep.epoch, seq: rep.seq, loads: make(map[uint32]int64)}
		v.origins[rep.origin] = o
	case rep.epoch > o.epoch:
		v.clear(o) // a restarted origin: its old counts mean nothing now
		o.epoch, o.seq = rep.epoch, rep.seq
	case rep.epoch < o.epoch, rep.seq < o.seq:
		return false
	case rep.seq == o.seq && o.gone:
		return false // a late copy of what it sent before it left
	default:
		o.seq = rep.seq // equal: another range of the same report, or a copy
	}
	o.gone = false
	o.lastHeard = now
	o.lastLag = now.Sub(time.Unix(0, rep.sentAt))
	v.applyRange(o, rep)
	return true
}

// applyRange makes o's counts within [rep.lo, rep.hi] equal to rep's.
func (v *loadView) applyRange(o *originLoad, rep *loadReport) {
	for w := range o.loads {
		if w < rep.lo || w > rep.hi {
			continue
		}
		if _, found := slices.BinarySearchFunc(rep.entries, w, byWorker); !found {
			v.set(o, w, 0)
		}
	}
	for _, e := range rep.entries {
		v.set(o, e.Worker, e.InFlight)
	}
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

func (v *loadView) clear(o *originLoad) {
	for w := range o.loads {
		v.set(o, w, 0)
	}
}

// forget drops origin's contribution at once.
func (v *loadView) forget(origin string) {
	if o := v.origins[origin]; o != nil {
		v.clear(o)
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
