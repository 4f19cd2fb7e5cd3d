package health

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Monitor tracks the health of a set of workers; see the package doc. Create it
// with New, give it workers with SetWorkers, and keep Run going for the
// replica's lifetime. All methods are safe for concurrent use.
type Monitor struct {
	cfg    Config
	clock  clock.PassiveClock
	log    *slog.Logger
	epoch  time.Time // zero of the nanosecond timeline kept in the atomics
	policy breakerPolicy
	probe  prober
	stalls *stallLog // when this replica itself was stalled
	// isolation: whether this replica, not its workers, is cut off
	isolation *isolation
	probed    probeNews // wakes AwaitProbed

	workers atomic.Pointer[workerSet]
	live    atomic.Int32 // live replicas, this one included (SetLiveReplicas)

	// controlMu serialises control-plane writers: SetWorkers, remote verdicts,
	// OnChange registration. The request path and the check loop never take it.
	controlMu sync.Mutex
	remote    map[string][]Verdict // origin -> its latest verdicts
	callbacks atomic.Pointer[[]func()]

	pending   atomic.Bool   // an eligibility or verdict change awaits delivery
	wake      chan struct{} // nudges Run to deliver now; capacity 1
	deliverMu sync.Mutex    // one delivery at a time, so callbacks never overlap
	running   atomic.Bool
}

// workerSet is an immutable view of the watched workers, swapped whole.
type workerSet struct {
	byID map[WorkerID]*worker
	list []*worker // sorted by id
}

// New returns a Monitor watching no workers. clk times verdicts; it is read on
// the request path (Begin, Progress, End), so it must be cheap and safe for
// concurrent use. A nil clk means clock.RealClock, whose readings carry Go's
// monotonic clock, so verdict timing is immune to wall-clock steps. A nil
// logger discards. It refuses a Config that fails Validate.
func New(cfg Config, clk clock.PassiveClock, logger *slog.Logger) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{
		cfg: cfg, clock: clk, log: logger, epoch: clk.Now(),
		policy: breakerPolicy{
			failures: cfg.CBFailureThreshold, successes: cfg.CBSuccessThreshold,
			trials: cfg.CBHalfOpenTrials, timeout: cfg.CBTimeout.Nanoseconds(), disabled: cfg.DisableCircuitBreaker,
		},
		probe:  prober{timeout: cfg.Timeout, apiKey: cfg.APIKey, dialer: cfg.Dialer},
		stalls: newStallLog(), isolation: newIsolation(),
		remote: make(map[string][]Verdict),
		wake:   make(chan struct{}, 1),
	}
	m.workers.Store(&workerSet{byID: map[WorkerID]*worker{}})
	m.live.Store(1)
	return m, nil
}

// now is the clock's reading in nanoseconds since the Monitor was created.
// Since reads only the monotonic clock where Now reads the wall clock too:
// a request's attempt reads it four times (more when streamed).
func (m *Monitor) now() int64 { return m.clock.Since(m.epoch).Nanoseconds() }

func (m *Monitor) timeAt(ns int64) time.Time { return m.epoch.Add(time.Duration(ns)) }

func (m *Monitor) lookup(id WorkerID) *worker { return m.workers.Load().byID[id] }

// SetWorkers replaces the set of watched workers. A worker already watched
// under the same URL, Group and Model keeps its state; a removed worker's
// state is dropped, and its attempts still in flight end harmlessly. A new
// worker is not eligible until its health endpoint has answered 2xx once:
// Run probes it at once (a fresh replica in front of live workers is ready
// within milliseconds), and again with a backoff from one second while it
// has never answered, so a worker that is still starting is taken in soon
// after it listens. Targets whose URL cannot be probed are skipped and
// reported in the returned error (wrapping ErrBadTarget); the others are
// applied.
func (m *Monitor) SetWorkers(targets []Target) error {
	m.controlMu.Lock()
	defer m.controlMu.Unlock()
	old := m.workers.Load()
	next := &workerSet{byID: make(map[WorkerID]*worker, len(targets))}
	var errs []error
	for _, t := range targets {
		w, err := m.carryOver(old, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next.byID[t.ID] = w
	}
	for _, w := range next.byID {
		next.list = append(next.list, w)
	}
	slices.SortFunc(next.list, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
	m.workers.Store(next)
	m.applyRemoteLocked()
	m.signal()
	m.probed.announce() // a waiter may be waiting for these workers to be watched
	return errors.Join(errs...)
}

// carryOver returns the state to keep for t: the old one if its URL is
// unchanged, else a fresh one.
func (m *Monitor) carryOver(old *workerSet, t Target) (*worker, error) {
	if w, ok := old.byID[t.ID]; ok && w.url == t.URL && w.group == t.Group && w.model == t.Model {
		return w, nil
	}
	pt, err := newProbeTarget(t.URL, m.cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("health: worker %d: %w", t.ID, err)
	}
	return newWorker(t, pt, m.policy), nil
}

// Eligible reports whether worker id may get a request now: healthy by active
// checks (so probed at least once), no wedge or degrade verdict of this
// replica, none of other replicas that counts here (see SetRemoteVerdicts),
// and a circuit that would admit it (closed, or half-open with a free trial
// slot).
// Lock-free; unknown workers are not eligible. Begin still has the last word,
// since a trial slot seen free here may be taken before Begin.
func (m *Monitor) Eligible(id WorkerID) bool {
	w := m.lookup(id)
	return w != nil && w.eligible() && w.hasSlot()
}

// OnChange registers fn to run after the eligibility of any worker changes, or
// this replica's own verdicts change (so a gossip layer can re-broadcast them).
// Callbacks run one at a time, outside the Monitor's locks, from Run's
// goroutine or from the caller of Tick or CheckNow; never from the request path.
// Changes are coalesced: one call may stand for several. fn may call any
// Monitor method except Tick, CheckNow and OnChange.
func (m *Monitor) OnChange(fn func()) {
	m.controlMu.Lock()
	defer m.controlMu.Unlock()
	var fns []func()
	if cur := m.callbacks.Load(); cur != nil {
		fns = slices.Clone(*cur)
	}
	fns = append(fns, fn)
	m.callbacks.Store(&fns)
}

// signal records a change for delivery; it never blocks.
func (m *Monitor) signal() {
	m.pending.Store(true)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// deliver runs the OnChange callbacks if a change is pending.
func (m *Monitor) deliver() {
	m.deliverMu.Lock()
	defer m.deliverMu.Unlock()
	if !m.pending.Swap(false) {
		return
	}
	if fns := m.callbacks.Load(); fns != nil {
		for _, fn := range *fns {
			fn()
		}
	}
}

// report logs what a step changed for w and queues a notification when its
// eligibility or verdicts moved. Called without w.mu held.
func (m *Monitor) report(w *worker, ch change) {
	if ch == 0 {
		return
	}
	eligible := w.eligible()
	if w.reported.Swap(eligible) != eligible || ch&changeVerdict != 0 {
		m.signal()
	}
	m.log.Info("worker health changed", "worker", w.id, "url", w.url,
		"eligible", eligible, "healthy", w.healthy.Load(),
		"circuit", stateOf(w.circuit.Load()).String(),
		"wedged", w.wedgedAt.Load() != notSet, "degraded", w.degradedAt.Load() != notSet)
}
