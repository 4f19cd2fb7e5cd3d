package core

import (
	"errors"
	"math"
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// DoorRefreshEvery is the door's cadence: how often its driver calls Tick,
// which reads the engines' saturation signal and the tier's loads, and
// lets the rate bucket's refills through.
const DoorRefreshEvery = 50 * time.Millisecond

// expectedOutputTokens is what a request is expected to generate, for its
// cost: the door decides before reading the body, so max_tokens is not
// known yet.
const expectedOutputTokens = 256

// Cost is the cost in tokens the door charges a request whose body is
// bodyBytes long: about four bytes a prompt token, and the output
// expected.
func Cost(bodyBytes int) int64 { return int64(bodyBytes)/4 + expectedOutputTokens }

// DoorConfig is what a Door is built with.
type DoorConfig struct {
	// Admission is what the door admits with: the router's flags, or
	// admission.DefaultConfig in the simulator. It must be valid.
	Admission admission.Config
	// Clock is the door's time: when requests arrive and end, how long
	// its queue waited, when a peer's report arrived. clock.RealClock{} in
	// the router, virtual time in the simulator. Required.
	Clock clock.PassiveClock
	// Loads is the replica's load table: what the other replicas run on
	// each worker, which the engines' bounds leave less room for. Required.
	Loads *affinity.LoadTable
	// Readings appends the engines' latest readings (the health monitor's
	// in the router, the modelled scrapes in the simulator); nil: there is
	// no saturation signal and the engines' limit stays unknown.
	Readings func(dst []admission.Reading) []admission.Reading
}

// Door is a replica's admission door: the Scheduler that queues what the
// engines cannot take, the engines' bounds it learns from their readings,
// the cost it charges a request, and the queue reports it trades with the
// peers. Its drivers only move time and readings: the proxy calls Tick on
// a wall-clock ticker and hands it requests, the fleet simulator does the
// same on virtual time, so both run one door.
//
// Concurrency: Arrive, Done, Cancel, Recost, LocalQueues and RemoteQueues
// are safe for concurrent use; Tick is its one driver's.
type Door struct {
	s        *admission.Scheduler
	clock    clock.PassiveClock
	loads    *affinity.LoadTable
	readings func([]admission.Reading) []admission.Reading
	timeout  time.Duration
	capacity admission.Capacity     // Tick's alone
	read     []admission.Reading    // Tick's scratch
	workers  []admission.WorkerLoad // Tick's scratch
}

// NewDoor builds a door from cfg.
func NewDoor(cfg DoorConfig) (*Door, error) {
	if cfg.Clock == nil || cfg.Loads == nil {
		return nil, errors.New("core: a door needs a clock and a load table")
	}
	a := cfg.Admission
	return &Door{s: admission.New(a.Scheduler()), clock: cfg.Clock, loads: cfg.Loads, readings: cfg.Readings,
		timeout: a.Timeout(), capacity: admission.Capacity{KVFull: a.KVFull}}, nil
}

// Scheduler is the door's queue, to read (Stats, Classes).
func (d *Door) Scheduler() *admission.Scheduler { return d.s }

// Timeout is how long a request may wait in the door's queue; its driver
// cancels it (TimedOut) then.
func (d *Door) Timeout() time.Duration { return d.timeout }

// Arrive issues the ticket of a request of class for tenant whose body is
// bodyBytes long (0 while unknown: Recost once it is), charged Cost.
func (d *Door) Arrive(class admission.Class, tenant string, bodyBytes int) *admission.Ticket {
	return d.s.Arrive(admission.Request{Class: class, Tenant: tenant, Cost: Cost(bodyBytes)}, d.clock.Now())
}

// Recost charges an admitted ticket for the body its request turned out
// to have, bodyBytes long, as Arrive would have from its length.
func (d *Door) Recost(tk *admission.Ticket, bodyBytes int) { d.s.SetCost(tk, Cost(bodyBytes)) }

// Done gives an admitted ticket's slot back; see admission.Scheduler.Done.
func (d *Door) Done(tk *admission.Ticket) { d.s.Done(tk, d.clock.Now()) }

// Suspend gives an admitted ticket's slot back and queues it again, first
// of its tenant's; see admission.Scheduler.Suspend.
func (d *Door) Suspend(tk *admission.Ticket) bool { return d.s.Suspend(tk, d.clock.Now()) }

// Cancel takes a queued ticket out of the queue, refused for reason, and
// reports true; see admission.Scheduler.Cancel.
func (d *Door) Cancel(tk *admission.Ticket, reason admission.Reason) bool {
	return d.s.Cancel(tk, reason, d.clock.Now())
}

// Tick is the door's beat, every DoorRefreshEvery: it applies the
// engines' latest readings and sets the requests this replica may have in
// flight, each worker's bound less what the other replicas run on it; and
// without a saturation signal it only lets through what the rate bucket
// refilled. Not safe for concurrent use: one driver ticks.
func (d *Door) Tick() {
	now := d.clock.Now()
	if d.readings == nil {
		d.s.Poll(now)
		return
	}
	d.read = d.readings(d.read[:0])
	for _, r := range d.read {
		d.capacity.Observe(r)
	}
	d.workers = d.workers[:0]
	d.loads.Each(func(l *affinity.Load) {
		d.workers = append(d.workers, admission.WorkerLoad{Worker: uint32(l.ID()), Others: l.Merged() - l.Local()})
	})
	d.s.SetLimit(d.capacity.Limit(d.workers), now)
}

// LocalQueues appends the door's queue report for the gossip
// (loadsync.Config.LocalQueues).
func (d *Door) LocalQueues(dst []loadsync.QueueDepth) []loadsync.QueueDepth {
	for _, e := range d.s.Report(nil, d.clock.Now()) {
		dst = append(dst, loadsync.QueueDepth{Class: uint8(e.Class), Tenant: e.Tenant, Queued: e.Queued,
			InFlight: e.InFlight, Tokens: e.Tokens, WaitedMs: uint32(min(e.Waited.Milliseconds(), math.MaxUint32))})
	}
	return dst
}

// RemoteQueues hands a peer's queue report, arriving now, to the door;
// nil forgets the peer (loadsync.Config.OnQueues).
func (d *Door) RemoteQueues(origin string, ds []loadsync.QueueDepth) {
	var entries []admission.PeerEntry
	for _, q := range ds {
		entries = append(entries, admission.PeerEntry{Class: admission.Class(q.Class), Tenant: q.Tenant,
			Queued: q.Queued, InFlight: q.InFlight, Tokens: q.Tokens, Waited: time.Duration(q.WaitedMs) * time.Millisecond})
	}
	d.s.SetPeer(origin, entries, d.clock.Now())
}
