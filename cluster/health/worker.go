package health

import (
	"math"
	"sync"
	"sync/atomic"
)

// WorkerID identifies a worker; the registry assigns it and never reuses it.
type WorkerID = uint32

// Target is a worker to watch.
type Target struct {
	ID  WorkerID
	URL string // base URL, e.g. "http://10.0.0.7:8000"; Config.Endpoint is appended
	// Group names the workers whose token rates are comparable (for instance the
	// model and role). Degrade detection compares a worker only with peers of the
	// same Group; the empty string is a group like any other.
	Group string
}

// notSet marks an unset time in the atomics below.
const notSet = math.MinInt64

// change says which parts of a worker's state a step altered.
type change uint8

const (
	changeHealth change = 1 << iota
	changeCircuit
	changeVerdict // this replica's own wedge or degrade verdict
	changeRemote  // the number of other replicas' verdicts
)

// worker is the health state of one worker. Fields read on the request path are
// atomics, written while holding mu so that they agree with the state machines
// under mu; mu is per worker and never held across I/O or callbacks.
type worker struct {
	id     WorkerID
	url    string
	group  string
	target probeTarget

	circuit      atomic.Uint64 // breaker word: generation<<2 | state
	trialsFree   atomic.Int32  // free trial slots while half-open
	healthy      atomic.Bool   // verdict of the active checks
	wedgedAt     atomic.Int64  // when the wedge verdict began, or notSet
	degradedAt   atomic.Int64  // when the degrade verdict began, or notSet
	remote       atomic.Int32  // origins with a verdict against this worker
	inflight     atomic.Int64  // attempts begun and not ended
	lastProgress atomic.Int64  // latest progress, or start of the current busy period
	peerRate     atomic.Uint64 // float64 bits: peers' median token rate at the last Tick
	reported     atomic.Bool   // eligibility last announced through OnChange
	checking     atomic.Bool   // an active check is running

	mu      sync.Mutex
	breaker breaker
	streak  int // consecutive probe results agreeing with the last one: >0 good, <0 bad
	rates   rateWindow
}

func newWorker(t Target, pt probeTarget, p breakerPolicy) *worker {
	w := &worker{id: t.ID, url: t.URL, group: t.Group, target: pt}
	w.breaker.policy = p
	w.healthy.Store(true)
	w.wedgedAt.Store(notSet)
	w.degradedAt.Store(notSet)
	w.lastProgress.Store(notSet)
	w.reported.Store(true)
	w.publishCircuit()
	return w
}

// publishCircuit copies the breaker state for lock-free readers. Caller holds
// mu, or owns w exclusively.
func (w *worker) publishCircuit() {
	w.circuit.Store(w.breaker.word())
	w.trialsFree.Store(w.breaker.trialsFree())
}

// eligible ignores the half-open trial slots: it is the eligibility announced
// through OnChange, which must not flap with every trial.
func (w *worker) eligible() bool {
	return w.healthy.Load() &&
		w.wedgedAt.Load() == notSet &&
		w.degradedAt.Load() == notSet &&
		w.remote.Load() == 0 &&
		stateOf(w.circuit.Load()) != CircuitOpen
}

// hasSlot reports whether the circuit would admit a request now.
func (w *worker) hasSlot() bool {
	switch stateOf(w.circuit.Load()) {
	case CircuitClosed:
		return true
	case CircuitHalfOpen:
		return w.trialsFree.Load() > 0
	}
	return false
}

// admit reserves passage through the circuit. A closed circuit needs no lock.
func (w *worker) admit() (gen uint64, trial, ok bool) {
	if word := w.circuit.Load(); stateOf(word) == CircuitClosed {
		return genOf(word), false, true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	gen, trial, ok = w.breaker.admit()
	w.publishCircuit()
	return gen, trial, ok
}

// recordOutcome feeds one request outcome to the breaker. Caller holds mu.
func (w *worker) recordOutcome(o Outcome, gen uint64, trial bool, now int64) change {
	moved := w.breaker.record(o, gen, trial, now)
	w.publishCircuit()
	if moved {
		return changeCircuit
	}
	return 0
}

// noteProgress moves lastProgress forward to now; it never moves it back.
func (w *worker) noteProgress(now int64) {
	for {
		old := w.lastProgress.Load()
		if now <= old || w.lastProgress.CompareAndSwap(old, now) {
			return
		}
	}
}

// recordProbe applies one active-check result. Caller holds mu.
func (w *worker) recordProbe(good bool, cfg *Config) change {
	switch {
	case good && w.streak >= 0:
		w.streak++
	case good:
		w.streak = 1
	case w.streak <= 0:
		w.streak--
	default:
		w.streak = -1
	}
	healthy := w.healthy.Load()
	if healthy && -w.streak >= cfg.FailureThreshold {
		w.healthy.Store(false)
		return changeHealth
	}
	if !healthy && w.streak >= cfg.SuccessThreshold {
		w.healthy.Store(true)
		return changeHealth
	}
	return 0
}

// setVerdicts applies this replica's wedge and degrade verdicts and lets an
// open circuit half-open once no verdict holds it. Caller holds mu.
func (w *worker) setVerdicts(now int64, wedged, degraded bool) change {
	var ch change
	ch |= setVerdict(&w.wedgedAt, wedged, now)
	ch |= setVerdict(&w.degradedAt, degraded, now)
	if wedged || degraded {
		if w.breaker.trip(now) {
			ch |= changeCircuit
		}
	} else if w.breaker.expire(now) {
		ch |= changeCircuit
	}
	w.publishCircuit()
	return ch
}

func setVerdict(since *atomic.Int64, holds bool, now int64) change {
	was := since.Load() != notSet
	switch {
	case holds && !was:
		since.Store(now)
	case !holds && was:
		since.Store(notSet)
	default:
		return 0
	}
	return changeVerdict
}

// stalled reports whether w has work in flight and has shown no progress for
// at least timeout.
func (w *worker) stalled(now, timeout int64) bool {
	if w.inflight.Load() <= 0 {
		return false
	}
	last := w.lastProgress.Load()
	return last != notSet && now-last >= timeout
}
