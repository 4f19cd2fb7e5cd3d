package fleet

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/virtualclock"
)

// DefaultEngineScrapeInterval is how often a replica reads each engine's
// saturation signal with Config.Door: the router's
// --engine-scrape-interval-secs default.
const DefaultEngineScrapeInterval = time.Second

// The door (Config.Door): each replica runs the router's admission door,
// core.Door, with the router's defaults. A request waits at the replica
// it reached while the engines, by what that replica last read of them,
// run all they can; its wait is part of its TTFT. What a door learns comes
// the way it does in the router: each engine's running, waiting and KV
// usage read every EngineScrapeInterval (each replica and worker at its own
// phase), the limit set every core.DoorRefreshEvery, and the peers' queue
// reports riding their load reports.

// newDoor is a replica's door over loads with the router's default
// admission and cfg's queue timeout, reading the engines as readings
// says; nil without Config.Door.
func newDoor(cfg Config, clk clock.PassiveClock, loads *affinity.LoadTable,
	readings func([]admission.Reading) []admission.Reading) (*core.Door, error) {
	if !cfg.Door {
		return nil, nil
	}
	a := admission.DefaultConfig()
	a.QueueTimeout = cfg.DoorQueueTimeout
	return core.NewDoor(core.DoorConfig{Admission: a, Clock: clk, Loads: loads, Readings: readings})
}

// doorTraffic takes requests through their replicas' doors: it queues a
// request its door holds, routes it once let in, fails one refused, and
// runs each door's limit refresh on the agenda.
type doorTraffic struct {
	cfg      Config // Door and EngineScrapeInterval
	clock    *virtualclock.Clock
	agenda   *agenda
	replicas []*replica
	workers  int        // workers every replica reads
	stats    *collector // counts the waits at the doors
	// busy reports whether requests are pending: the doors' own events
	// stop with the run.
	busy func() bool
	// fail retires a request that could not be served.
	fail func(req *request)
}

// start schedules every replica's first limit refresh and every
// (replica, worker)'s first engine reading, phases spread evenly.
func (d *doorTraffic) start() {
	if !d.cfg.Door {
		return
	}
	n := time.Duration(len(d.replicas))
	pairs := n * time.Duration(d.workers)
	for i := range d.replicas {
		d.agenda.push(event{at: core.DoorRefreshEvery * time.Duration(i) / n, kind: evRefresh, target: i})
		for w := range d.workers {
			at := d.cfg.EngineScrapeInterval * time.Duration(i*d.workers+w) / pairs
			d.agenda.push(event{at: at, kind: evScrape, target: i, gen: uint64(w)})
		}
	}
}

// scrape reads worker w's engine for replica i, as its monitor does.
func (s *simulation) scrape(i, w int) {
	if s.workers[w].dead {
		return // the replicas read it no more (kill.go)
	}
	now := s.clock.Elapsed()
	s.advance(w, now)
	s.reschedule(w)
	e := s.workers[w].engine
	r := s.replicas[i]
	r.readings[w] = admission.Reading{Worker: uint32(s.workers[w].id), At: s.clock.Now(),
		Running: float64(e.Running()), Waiting: float64(e.Waiting()), KVUsage: e.KVUsage()}
	if s.pending > 0 {
		s.agenda.push(event{at: now + s.cfg.EngineScrapeInterval, kind: evScrape, target: i, gen: uint64(w)})
	}
}

// refresh ticks replica i's door: it sets its limit from the replica's
// readings and loads.
func (d *doorTraffic) refresh(i int) {
	r := d.replicas[i]
	r.door.Tick()
	d.letIn(r)
	if d.busy() {
		d.agenda.push(event{at: d.clock.Elapsed() + core.DoorRefreshEvery, kind: evRefresh, target: i})
	}
}

// knock takes an arriving request to replica r's door, and reports whether
// it went in at once. A request the door queues waits in r.queued; one it
// refuses fails.
func (d *doorTraffic) knock(r *replica, req *request) bool {
	if r.door == nil {
		return true
	}
	tk := r.door.Arrive(r.door.Scheduler().Classes().Default(), "", len(req.arrival.Prompt))
	req.ticket = tk
	select {
	case <-tk.Ready():
		d.stats.doorWaits = append(d.stats.doorWaits, 0)
		if tk.Err() != nil {
			d.refused(req)
			return false
		}
		return true
	default:
	}
	r.queued = append(r.queued, req)
	d.agenda.push(event{at: d.clock.Elapsed() + r.door.Timeout(), kind: evQueueTimeout, req: req})
	d.letIn(r) // the arrival may have let an earlier request go, or itself
	return false
}

// letIn routes the requests replica r's door let go since it last looked,
// each as an event at this instant (the engine that freed a slot may be in
// the middle of reporting its events), and fails those it refused.
func (d *doorTraffic) letIn(r *replica) {
	r.doorMoved = false
	kept := r.queued[:0]
	for _, req := range r.queued {
		select {
		case <-req.ticket.Ready():
		default:
			kept = append(kept, req)
			continue
		}
		d.stats.doorWaits = append(d.stats.doorWaits, req.ticket.Waited())
		if req.ticket.Err() != nil {
			d.refused(req)
			continue
		}
		d.agenda.push(event{at: d.clock.Elapsed(), kind: evAdmitted, req: req})
	}
	clear(r.queued[len(kept):])
	r.queued = kept
}

// refused fails a request its door turned away: its ticket holds no slot
// to give back.
func (d *doorTraffic) refused(req *request) {
	req.ticket = nil
	d.fail(req)
}

// queueTimeout refuses a request still queued at its door after the
// router's --queue-timeout-secs.
func (d *doorTraffic) queueTimeout(req *request) {
	r := req.replica
	if req.ticket != nil && r.door.Cancel(req.ticket, admission.TimedOut) {
		d.letIn(r)
	}
}

// leave gives a finished or failed request's slot back to its door.
func (d *doorTraffic) leave(req *request) {
	tk := req.ticket
	if tk == nil {
		return
	}
	req.ticket = nil
	r := req.replica
	r.door.Done(tk)
	d.letIn(r)
}
