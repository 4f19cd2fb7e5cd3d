package core

import (
	"math"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// DoorRefreshEvery is how often a replica's door reads the engines'
// saturation signal and the tier's loads, and lets the rate bucket's
// refills through.
const DoorRefreshEvery = 50 * time.Millisecond

// Door is a replica's admission door: the Scheduler that queues what the
// engines cannot take, the engines' bounds it learns from their readings,
// and the queue reports it trades with the peers. The proxy drives it on
// the wall clock, the fleet simulator on virtual time, so both run one
// door.
type Door struct {
	s        *admission.Scheduler
	now      func() time.Time
	capacity admission.Capacity     // Refresh's alone
	workers  []admission.WorkerLoad // Refresh's scratch
}

// NewDoor builds a door from a valid admission config; kvFull is the KV
// cache usage at which an engine counts as full (0: the default), and now
// the clock its queue reports are made on.
func NewDoor(cfg admission.SchedulerConfig, kvFull float64, now func() time.Time) *Door {
	return &Door{s: admission.New(cfg), now: now, capacity: admission.Capacity{KVFull: kvFull}}
}

// Scheduler is the door's queue: Arrive, Done and Cancel go to it.
func (d *Door) Scheduler() *admission.Scheduler { return d.s }

// Refresh applies the engines' latest readings and sets the requests this
// replica may have in flight: each worker's bound less what the other
// replicas run on it, by loads. Not safe for concurrent use: one refresher
// calls it.
func (d *Door) Refresh(loads *affinity.LoadTable, readings []admission.Reading, now time.Time) {
	for _, r := range readings {
		d.capacity.Observe(r)
	}
	d.workers = d.workers[:0]
	loads.Each(func(l *affinity.Load) {
		d.workers = append(d.workers, admission.WorkerLoad{Worker: uint32(l.ID()), Others: l.Merged() - l.Local()})
	})
	d.s.SetLimit(d.capacity.Limit(d.workers), now)
}

// LocalQueues appends the door's queue report for the gossip
// (loadsync.Config.LocalQueues).
func (d *Door) LocalQueues(dst []loadsync.QueueDepth) []loadsync.QueueDepth {
	for _, e := range d.s.Report(nil, d.now()) {
		dst = append(dst, loadsync.QueueDepth{Class: uint8(e.Class), Tenant: e.Tenant, Queued: e.Queued,
			InFlight: e.InFlight, Tokens: e.Tokens, WaitedMs: uint32(min(e.Waited.Milliseconds(), math.MaxUint32))})
	}
	return dst
}

// RemoteQueues hands a peer's queue report, arrived at now, to the door;
// nil forgets the peer (loadsync.Config.OnQueues).
func (d *Door) RemoteQueues(origin string, ds []loadsync.QueueDepth, now time.Time) {
	var entries []admission.PeerEntry
	for _, q := range ds {
		entries = append(entries, admission.PeerEntry{Class: admission.Class(q.Class), Tenant: q.Tenant,
			Queued: q.Queued, InFlight: q.InFlight, Tokens: q.Tokens, Waited: time.Duration(q.WaitedMs) * time.Millisecond})
	}
	d.s.SetPeer(origin, entries, now)
}
