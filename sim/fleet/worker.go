package fleet

import (
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
)

// worker is one simulated engine and what the run measures of it.
type worker struct {
	id     affinity.WorkerID
	engine *sim.Engine

	// armed says an evStep for generation gen at time at is on the agenda;
	// an evStep of an older generation is stale and skipped.
	armed bool
	at    time.Duration
	gen   uint64

	// outstanding counts requests submitted and not done. The worker is
	// busy while it is above zero: busy sums those stretches.
	outstanding int
	busySince   time.Duration
	busy        time.Duration

	// promptTokens and cachedTokens sum the usage of finished requests:
	// the hit rate as this engine's cache saw it.
	promptTokens, cachedTokens int64

	// dead says the worker was killed (Config.Kills): its engine is never
	// advanced nor given a request again.
	dead bool
}

func newWorker(id affinity.WorkerID, cfg sim.Config) *worker {
	return &worker{id: id, engine: sim.NewEngine(cfg)}
}

// begin counts a request submitted at now.
func (w *worker) begin(now time.Duration) {
	if w.outstanding == 0 {
		w.busySince = now
	}
	w.outstanding++
}

// end counts a request done at at with its final usage.
func (w *worker) end(at time.Duration, u sim.Usage) {
	w.outstanding--
	if w.outstanding == 0 {
		w.busy += at - w.busySince
	}
	w.promptTokens += int64(u.Prompt)
	w.cachedTokens += int64(u.Cached)
}

// die kills the worker at at: the requests it held are cut, so its busy
// stretch ends, and a step of its engine still on the agenda is stale.
func (w *worker) die(at time.Duration) {
	if w.outstanding > 0 {
		w.busy += at - w.busySince
	}
	w.outstanding, w.armed, w.dead = 0, false, true
}

// due returns the time of the engine's next state change when it differs
// from what is on the agenda, arming the worker for it under a new
// generation; ok is false when nothing new needs scheduling.
func (w *worker) due() (at time.Duration, gen uint64, ok bool) {
	next, busy := w.engine.NextEventAt()
	if !busy || w.dead {
		w.armed = false
		return 0, 0, false
	}
	if w.armed && w.at == next {
		return 0, 0, false
	}
	w.gen++
	w.armed, w.at = true, next
	return next, w.gen, true
}

// fire reports whether an evStep of generation gen is current, and disarms
// the worker if so.
func (w *worker) fire(gen uint64) bool {
	if !w.armed || gen != w.gen {
		return false
	}
	w.armed = false
	return true
}
