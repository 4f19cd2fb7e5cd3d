package health

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// judge is the health protocol: every verdict this package reaches, and
// nothing else. It observes events (attempts begun, their progress and
// outcomes, active-check answers, recovery-probe answers, engine readings,
// heartbeats, other replicas' verdicts) and time, which its callers pass in
// as nanoseconds on the Monitor's timeline; it does no network I/O and
// reads no clock, so a test drives it alone with a virtual clock. What it
// wants done (an engine read, a recovery probe, a first-contact check) it
// notes on the worker (wantScrape, wantGenerate, contactDue) for the
// prober and the scraper to send, and it emits each change through
// changed, which the Monitor turns into OnChange notifications.
//
// All methods are safe for concurrent use: the request path (begin,
// ended, eligible) reads atomics and holds a worker's mutex for a few
// instructions; control-plane writers (setWorkers, remote verdicts)
// serialise in remoteVerdicts.
type judge struct {
	cfg    Config
	log    *slog.Logger
	epoch  time.Time // what 0 on the timeline is, for the times it reports
	policy breakerPolicy
	stalls *stallLog // when this replica itself was stalled
	// isolation: whether this replica, not its workers, is cut off
	isolation *isolation
	// remote: the other replicas' verdicts, and whether they take a
	// worker out here (quorum.go)
	remote *remoteVerdicts
	// wedge and degrade are the two verdicts this replica reaches itself
	// (wedge.go, rates.go).
	wedge   *wedgeJudge
	degrade *degradeJudge
	changed func() // an eligibility or verdict moved; never blocks

	workers atomic.Pointer[workerSet]
}

// workerSet is an immutable view of the watched workers, swapped whole.
type workerSet struct {
	byID map[WorkerID]*worker
	list []*worker // sorted by id
}

// newJudge returns a judge of no workers. cfg must be valid; epoch is the
// wall time of 0 on the timeline; changed is called, without blocking and
// outside any lock, whenever an eligibility or verdict moves.
func newJudge(cfg Config, epoch time.Time, log *slog.Logger, changed func()) *judge {
	j := &judge{
		cfg: cfg, log: log, epoch: epoch, changed: changed,
		policy: breakerPolicy{
			failures: cfg.CBFailureThreshold, successes: cfg.CBSuccessThreshold,
			trials: cfg.CBHalfOpenTrials, timeout: cfg.CBTimeout.Nanoseconds(), disabled: cfg.DisableCircuitBreaker,
		},
		stalls:    newStallLog(cfg.EvalInterval, log),
		isolation: newIsolation(cfg.Interval, log),
	}
	j.remote = newRemoteVerdicts(&j.workers, j.report)
	j.wedge = &wedgeJudge{cfg: cfg, stalls: j.stalls}
	j.degrade = &degradeJudge{cfg: cfg, stalls: j.stalls}
	j.workers.Store(&workerSet{byID: map[WorkerID]*worker{}})
	return j
}

func (j *judge) timeAt(ns int64) time.Time { return j.epoch.Add(time.Duration(ns)) }

func (j *judge) lookup(id WorkerID) *worker { return j.workers.Load().byID[id] }

// list is the watched workers, sorted by id; the caller must not modify it.
func (j *judge) list() []*worker { return j.workers.Load().list }

// setWorkers replaces the set of watched workers (see Monitor.SetWorkers).
func (j *judge) setWorkers(targets []Target) error {
	var errs []error
	j.remote.swapWorkers(func(old *workerSet) *workerSet {
		next := &workerSet{byID: make(map[WorkerID]*worker, len(targets))}
		for _, t := range targets {
			w, err := j.carryOver(old, t)
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
		return next
	})
	j.changed()
	return errors.Join(errs...)
}

// carryOver returns the state to keep for t: the old one if its URL is
// unchanged, else a fresh one.
func (j *judge) carryOver(old *workerSet, t Target) (*worker, error) {
	if w, ok := old.byID[t.ID]; ok && w.url == t.URL && w.group == t.Group && w.model == t.Model {
		return w, nil
	}
	pt, err := newProbeTarget(t.URL, j.cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("health: worker %d: %w", t.ID, err)
	}
	return newWorker(t, pt, j.policy), nil
}

// eligible is Monitor.Eligible. Lock-free.
func (j *judge) eligible(id WorkerID) bool {
	w := j.lookup(id)
	return w != nil && w.eligible() && w.hasSlot()
}

// allProbed reports whether every worker of ids is watched and has answered
// an active check.
func (j *judge) allProbed(ids []WorkerID) bool {
	for _, id := range ids {
		if w := j.lookup(id); w == nil || !w.probed.Load() {
			return false
		}
	}
	return true
}

// report logs what a step changed for w and emits a change when its
// eligibility or verdicts moved. Called without w.mu held.
func (j *judge) report(w *worker, ch change) {
	if ch == 0 {
		return
	}
	eligible := w.eligible()
	if w.reported.Swap(eligible) != eligible || ch&changeVerdict != 0 {
		j.changed()
	}
	j.log.Info("worker health changed", "worker", w.id, "url", w.url,
		"eligible", eligible, "healthy", w.healthy.Load(),
		"circuit", stateOf(w.circuit.Load()).String(),
		"wedged", w.wedgedAt.Load() != notSet, "degraded", w.degradedAt.Load() != notSet)
}
