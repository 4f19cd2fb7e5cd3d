package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
)

// Kill kills one worker at a virtual instant: its engine goes away with
// its cache, and the requests it held are cut (resume.go).
//
// The model is the simplest faithful one: the tier learns of the death at
// the instant it happens. Every stream on the engine breaks then, as a
// connection reset does, and every replica drops the worker at once, as
// the registry removing it would: it leaves the replica's candidates and
// its registry (core.Replica.SetRegistry: peers' facts and loads of it are
// ignored), its blocks leave the index (core.Replica.HealthChanged), and
// the door reads it no more. The health checks' delay before a real
// router notices is left out: an attempt on a dead worker would fail at
// connect and be retried at once, which changes little but the backoff.
type Kill struct {
	// Worker is the worker's id, from 1.
	Worker affinity.WorkerID
	// At is the instant of its death, since the start of the run.
	At time.Duration
}

// validateKills refuses a kill of no worker, before the run, twice of one
// worker, or in a split fleet (a continuation there goes through a new
// prefill, which is not modelled).
func (c Config) validateKills() error {
	if len(c.Kills) > 0 && c.Disaggregated() {
		return fmt.Errorf("%w: Kills: not modelled with a prefill/decode split", ErrBadConfig)
	}
	seen := map[affinity.WorkerID]bool{}
	for _, k := range c.Kills {
		switch {
		case k.Worker < 1 || int(k.Worker) > c.totalWorkers():
			return fmt.Errorf("%w: Kills: worker %d not in [1, %d]", ErrBadConfig, k.Worker, c.totalWorkers())
		case k.At < 0:
			return fmt.Errorf("%w: Kills: worker %d killed at %v, before the run", ErrBadConfig, k.Worker, k.At)
		case seen[k.Worker]:
			return fmt.Errorf("%w: Kills: worker %d killed twice", ErrBadConfig, k.Worker)
		}
		seen[k.Worker] = true
	}
	return nil
}

// scheduleKills puts every kill on the agenda. A kill after the last
// request is never reached: the run ends first.
func (s *simulation) scheduleKills() {
	for _, k := range s.cfg.Kills {
		s.agenda.push(event{at: k.At, kind: evKill, target: s.index(k.Worker)})
	}
}

// kill kills worker w now: what its engine finished by now is answered,
// then the worker leaves every replica and the requests it still held are
// cut, in the order of their ids so that a run repeats.
func (s *simulation) kill(w int) {
	now := s.clock.Elapsed()
	s.advance(w, now)
	wk := s.workers[w]
	held := heldBy(s.inflight, wk)
	wk.die(now)
	s.stats.killed++
	s.unregister(wk)
	for _, h := range held {
		s.migration.cut(h.req, h.usage)
	}
}

// heldRequest is a request a dying engine held, and what it had
// generated of it.
type heldRequest struct {
	req   *request
	usage sim.Usage
}

// heldBy lists the requests of inflight that wk's engine holds, by id.
func heldBy(inflight map[sim.RequestID]*request, wk *worker) []heldRequest {
	var held []heldRequest
	for _, req := range inflight {
		if req.on != wk {
			continue
		}
		u, ok := wk.engine.Progress(req.id)
		if !ok {
			panic(fmt.Sprintf("fleet: worker %d lost request %d", wk.id, req.id))
		}
		held = append(held, heldRequest{req, u})
	}
	slices.SortFunc(held, func(a, b heldRequest) int { return cmp.Compare(a.req.id, b.req.id) })
	return held
}

// unregister takes a dead worker out of every replica and the oracle.
func (s *simulation) unregister(dead *worker) {
	var live []affinity.WorkerID
	for _, wk := range s.workers {
		if !wk.dead {
			live = append(live, wk.id)
		}
	}
	gone := []affinity.WorkerID{dead.id}
	for _, r := range s.replicas {
		r.pool = r.pool.Without(dead.id)
		r.core.SetRegistry(live)
		r.core.HealthChanged(gone)
		r.readings[s.index(dead.id)] = admission.Reading{}
	}
	s.oracle.forget(dead.id)
}
