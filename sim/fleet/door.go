package fleet

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
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

// startDoors schedules every replica's first limit refresh and every
// (replica, worker)'s first engine reading, phases spread evenly.
func (s *simulation) startDoors() {
	if !s.cfg.Door {
		return
	}
	n := time.Duration(len(s.replicas))
	pairs := n * time.Duration(len(s.workers))
	for i := range s.replicas {
		s.agenda.push(event{at: core.DoorRefreshEvery * time.Duration(i) / n, kind: evRefresh, target: i})
		for w := range s.workers {
			at := s.cfg.EngineScrapeInterval * time.Duration(i*len(s.workers)+w) / pairs
			s.agenda.push(event{at: at, kind: evScrape, target: i, gen: uint64(w)})
		}
	}
}

// scrape reads worker w's engine for replica i, as its monitor does.
func (s *simulation) scrape(i, w int) {
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
func (s *simulation) refresh(i int) {
	r := s.replicas[i]
	r.door.Tick()
	s.letIn(r)
	if s.pending > 0 {
		s.agenda.push(event{at: s.clock.Elapsed() + core.DoorRefreshEvery, kind: evRefresh, target: i})
	}
}

// knock takes an arriving request to replica r's door, and reports whether
// it went in at once. A request the door queues waits in r.queued; one it
// refuses fails.
func (s *simulation) knock(r *replica, req *request) bool {
	if r.door == nil {
		return true
	}
	tk := r.door.Arrive(r.door.Scheduler().Classes().Default(), "", len(req.arrival.Prompt))
	req.ticket = tk
	select {
	case <-tk.Ready():
		s.stats.doorWaits = append(s.stats.doorWaits, 0)
		if tk.Err() != nil {
			s.refused(req)
			return false
		}
		return true
	default:
	}
	r.queued = append(r.queued, req)
	s.agenda.push(event{at: s.clock.Elapsed() + r.door.Timeout(), kind: evQueueTimeout, req: req})
	s.letIn(r) // the arrival may have let an earlier request go, or itself
	return false
}

// letIn routes the requests replica r's door let go since it last looked,
// each as an event at this instant (the engine that freed a slot may be in
// the middle of reporting its events), and fails those it refused.
func (s *simulation) letIn(r *replica) {
	r.doorMoved = false
	kept := r.queued[:0]
	for _, req := range r.queued {
		select {
		case <-req.ticket.Ready():
		default:
			kept = append(kept, req)
			continue
		}
		s.stats.doorWaits = append(s.stats.doorWaits, req.ticket.Waited())
		if req.ticket.Err() != nil {
			s.refused(req)
			continue
		}
		s.agenda.push(event{at: s.clock.Elapsed(), kind: evAdmitted, req: req})
	}
	clear(r.queued[len(kept):])
	r.queued = kept
}

// refused fails a request its door turned away: its ticket holds no slot
// to give back.
func (s *simulation) refused(req *request) {
	req.ticket = nil
	s.fail(req)
}

// queueTimeout refuses a request still queued at its door after the
// router's --queue-timeout-secs.
func (s *simulation) queueTimeout(req *request) {
	r := req.replica
	if req.ticket != nil && r.door.Cancel(req.ticket, admission.TimedOut) {
		s.letIn(r)
	}
}

// leave gives a finished or failed request's slot back to its door.
func (s *simulation) leave(req *request) {
	tk := req.ticket
	if tk == nil {
		return
	}
	req.ticket = nil
	r := req.replica
	r.door.Done(tk)
	s.letIn(r)
}
