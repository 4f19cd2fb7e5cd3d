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
	// Model is the model named in the one-token generation that probes a worker
	// under a verdict; empty sends none, and the engine picks its default.
	Model string
}

// notSet marks an unset time in the atomics below.
const notSet = math.MinInt64

// change says which parts of a worker's state a step altered.
type change uint8

const (
	changeHealth change = 1 << iota
	changeCircuit
	changeVerdict // this replica's own wedge or degrade verdict
	changeRemote  // other replicas' verdicts, or whether they take the worker out
)

// worker is the health state of one worker. Fields read on the request path are
// atomics, written while holding mu so that they agree with the state machines
// under mu; mu is per worker and never held across I/O or callbacks. The
// fields are the judge's state, but for those the I/O parts keep here so
// that they come and go with the worker: target and the checking and
// generating flags (the prober's), scraping and occupancy (the scraper's).
type worker struct {
	id     WorkerID
	url    string
	group  string
	model  string
	target probeTarget

	circuit      atomic.Uint64 // breaker word: generation<<2 | state
	trialsFree   atomic.Int32  // free trial slots while half-open
	healthy      atomic.Bool   // verdict of the active checks; false until a probe answered 2xx
	probed       atomic.Bool   // an active check has answered at least once
	wedgedAt     atomic.Int64  // when the wedge verdict began, or notSet
	degradedAt   atomic.Int64  // when the degrade verdict began, or notSet
	remote       atomic.Int32  // origins with a verdict against this worker
	remoteOut    atomic.Bool   // those verdicts take the worker out here (quorum or own evidence)
	inflight     atomic.Int64  // attempts begun and not ended
	lastProgress atomic.Int64  // latest progress, or start of the current busy period
	heardAt      atomic.Int64  // latest progress proper (not the start of a busy period), or notSet
	engineAt     atomic.Int64  // latest engine progress seen in /metrics, or notSet
	peerRate     atomic.Uint64 // float64 bits: peers' median token rate at the last Tick
	reported     atomic.Bool   // eligibility last announced through OnChange
	checking     atomic.Bool   // an active check is running
	scraping     atomic.Bool   // a /metrics scrape is running
	generating   atomic.Bool   // a recovery probe is running
	wantScrape   atomic.Bool   // Tick found the engine's progress worth reading
	wantGenerate atomic.Bool   // Tick found a recovery probe due

	mu       sync.Mutex
	breaker  breaker
	streak   int  // consecutive probe results agreeing with the last one: >0 good, <0 bad
	everUp   bool // a probe has answered 2xx at least once
	contact  backoff
	rates    rateWindow
	attempts attemptList
	engine   engineState
	recovery recovery
	// occupancy is the latest readable scrape, taken at occupancyAt (when
	// read is true), whatever its counters: the saturation signal. The
	// scraper's; the judge neither reads nor writes it.
	occupancy   engineReading
	occupancyAt int64
	read        bool
	// remoteWedged and remoteDegraded count the origins holding each kind of
	// verdict; suspectWedged and suspectSlow are this replica's own evidence
	// short of a verdict, as of the last Tick.
	remoteWedged, remoteDegraded int32
	suspectWedged, suspectSlow   bool
}

func newWorker(t Target, pt probeTarget, p breakerPolicy) *worker {
	w := &worker{id: t.ID, url: t.URL, group: t.Group, model: t.Model, target: pt}
	w.breaker.policy = p
	w.wedgedAt.Store(notSet)
	w.degradedAt.Store(notSet)
	w.lastProgress.Store(notSet)
	w.heardAt.Store(notSet)
	w.engineAt.Store(notSet)
	w.contact = backoff{next: notSet}
	w.recovery.next = backoff{next: notSet}
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
		!w.remoteOut.Load() &&
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

// noteProgress moves the silence clock forward to now; it never moves it
// back. Alone, it marks the start or end of a busy period.
func (w *worker) noteProgress(now int64) { advance(&w.lastProgress, now) }

// noteHeard records progress proper at now: the worker delivered something.
// Only this lifts a wedge verdict.
func (w *worker) noteHeard(now int64) {
	advance(&w.heardAt, now)
	w.noteProgress(now)
}

// advance moves t forward to now; it never moves it back.
func advance(t *atomic.Int64, now int64) {
	for {
		old := t.Load()
		if now <= old || t.CompareAndSwap(old, now) {
			return
		}
	}
}

// recordProbe applies one active-check result. The first good answer of a
// worker that was never healthy makes it healthy at once: there is no earlier
// verdict to overturn, and a fresh replica in front of live workers should
// serve within milliseconds. A worker marked unhealthy also gives up its
// attempts that have heard nothing from it: it hangs. Caller holds mu.
func (w *worker) recordProbe(good bool, cfg *Config) change {
	w.probed.Store(true)
	w.countStreak(good)
	healthy := w.healthy.Load()
	switch {
	case good && !w.everUp:
		w.everUp = true
		w.healthy.Store(true)
		return changeHealth
	case healthy && -w.streak >= cfg.FailureThreshold:
		w.healthy.Store(false)
		w.attempts.each(func(a *Attempt) {
			if a.heardAt.Load() == notSet {
				a.closeStuck()
			}
		})
		return changeHealth
	case !healthy && w.everUp && w.streak >= cfg.SuccessThreshold:
		w.healthy.Store(true)
		return changeHealth
	}
	return 0
}

func (w *worker) countStreak(good bool) {
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

// verdictHeld reports whether this replica holds a verdict against w.
func (w *worker) verdictHeld() bool {
	return w.wedgedAt.Load() != notSet || w.degradedAt.Load() != notSet
}

// backoff schedules a retried action: next is when it is due (notSet: at
// once), and each failure doubles the wait up to a cap.
type backoff struct {
	next int64
	wait int64
}

// due reports whether the action may run at now.
func (b *backoff) due(now int64) bool { return b.next == notSet || now >= b.next }

// failed schedules the next try: first after base, then twice as long each
// time, never longer than ceiling.
func (b *backoff) failed(now, base, ceiling int64) {
	b.wait = min(max(b.wait*2, base), ceiling)
	b.next = now + b.wait
}

// reset makes the action due at once, with its wait started afresh.
func (b *backoff) reset() { *b = backoff{next: notSet} }
