package health

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Monitor tracks the health of a set of workers; see the package doc. Create it
// with New, give it workers with SetWorkers, and keep Run going for the
// replica's lifetime. All methods are safe for concurrent use.
//
// It wires three parts and owns the clock: the judge (every verdict; no I/O,
// time passed in), the prober (active checks and recovery probes, whose
// answers it hands the judge) and the engines' scraper (the /metrics reads:
// progress for the judge, readings for admission). Callers outside the
// package see only the Monitor and the scraper (Engines).
type Monitor struct {
	cfg     Config
	clock   clock.PassiveClock
	log     *slog.Logger
	epoch   time.Time // zero of the nanosecond timeline the judge keeps
	judge   *judge
	prober  *prober
	engines *EngineScraper
	notify  *notifier
	running atomic.Bool
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
	m := &Monitor{cfg: cfg, clock: clk, log: logger, epoch: clk.Now(), notify: newNotifier()}
	m.judge = newJudge(cfg, m.epoch, logger, m.notify.signal)
	client := workerClient{timeout: cfg.Timeout, apiKey: cfg.APIKey, dialer: cfg.Dialer}
	m.prober = &prober{cfg: cfg, client: client, judge: m.judge, now: m.now, log: logger}
	m.engines = &EngineScraper{timeout: cfg.Timeout, client: client, judge: m.judge, now: m.now, log: logger}
	return m, nil
}

// now is the clock's reading in nanoseconds since the Monitor was created.
// Since reads only the monotonic clock where Now reads the wall clock too:
// a request's attempt reads it four times (more when streamed).
func (m *Monitor) now() int64 { return m.clock.Since(m.epoch).Nanoseconds() }

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
	err := m.judge.setWorkers(targets)
	m.prober.probed.announce() // a waiter may be waiting for these workers to be watched
	return err
}

// Eligible reports whether worker id may get a request now: healthy by active
// checks (so probed at least once), no wedge or degrade verdict of this
// replica, none of other replicas that counts here (see SetRemoteVerdicts),
// and a circuit that would admit it (closed, or half-open with a free trial
// slot).
// Lock-free; unknown workers are not eligible. Begin still has the last word,
// since a trial slot seen free here may be taken before Begin.
func (m *Monitor) Eligible(id WorkerID) bool { return m.judge.eligible(id) }

// OnChange registers fn to run after the eligibility of any worker changes, or
// this replica's own verdicts change (so a gossip layer can re-broadcast them).
// Callbacks run one at a time, outside the Monitor's locks, from Run's
// goroutine or from the caller of Tick or CheckNow; never from the request path.
// Changes are coalesced: one call may stand for several. fn may call any
// Monitor method except Tick, CheckNow and OnChange.
func (m *Monitor) OnChange(fn func()) { m.notify.add(fn) }

// Tick evaluates everything that depends on time passing. For every worker it
// measures the decode rate of its streams in flight, closes the Stuck channel
// of attempts that heard nothing for WedgeTimeout, judges the worker wedged
// (in flight, silent for WedgeTimeout) or degraded (token rate far below its
// peers'), lifts a wedge verdict once progress has returned, weighs other
// replicas' verdicts against the quorum and this replica's own evidence, opens
// or half-opens circuits accordingly, and notes which workers need their
// engine read or a recovery probe (which Run then sends). Silences are
// measured without the windows in which this replica itself was stalled. It
// then delivers pending OnChange notifications. Run calls it every
// EvalInterval; tests call it after stepping a FakeClock. Safe for concurrent
// use.
func (m *Monitor) Tick() {
	m.judge.tick(m.now())
	m.notify.deliver()
}

// Engines is the engines' scraper: the latest reading of each worker's
// engine, which admission judges saturation from.
func (m *Monitor) Engines() *EngineScraper { return m.engines }

// AwaitProbed waits until each of the workers ids is watched and its health
// endpoint has answered a probe (well or not), or ctx ends, whose error it
// then returns. A replica calls it before it says it is ready, so that it
// routes at once to the workers it was started with. Run (or CheckNow) must
// be running for the probes to be sent.
func (m *Monitor) AwaitProbed(ctx context.Context, ids ...WorkerID) error {
	for {
		news := m.prober.probed.next()
		if m.judge.allProbed(ids) {
			return nil
		}
		select {
		case <-news:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Begin admits one request to worker id and returns its Attempt. It fails with
// ErrUnknownWorker, or with ErrCircuitOpen when the circuit is open or half-open
// with every trial slot taken; the proxy should then select another worker. In
// a half-open circuit the Attempt holds a trial slot until End. Begin gates only
// on the circuit: unhealthy workers and verdicts are for the selector to skip
// through Eligible. Cheap: atomics, one short hold of the worker's mutex and
// two allocations.
func (m *Monitor) Begin(id WorkerID) (*Attempt, error) {
	return m.judge.begin(id, m.now(), m)
}

// Status returns the status of worker id, and false if it is not watched.
// It holds the worker's mutex for a few instructions.
func (m *Monitor) Status(id WorkerID) (WorkerStatus, bool) { return m.judge.status(id) }

// Statuses returns the status of every watched worker, ordered by id.
func (m *Monitor) Statuses() []WorkerStatus { return m.judge.statuses() }

// Verdicts returns this replica's own verdicts, ordered by worker then kind.
// OnChange fires whenever they change.
func (m *Monitor) Verdicts() []Verdict { return m.judge.verdicts() }

// SetRemoteVerdicts replaces the verdicts that replica origin holds. A worker
// is ineligible here while a quorum of the live replicas (SetLiveReplicas)
// holds verdicts against it, or at least one does and this replica's own
// evidence agrees (see quorum.go); each origin's verdicts stand until it
// withdraws them (a later report without them, or an empty one) or is
// forgotten. Verdicts of unknown kinds are ignored, and those naming workers
// not watched yet apply when the worker is added. Cost O(workers + verdicts);
// it never blocks on the request path or on callbacks.
func (m *Monitor) SetRemoteVerdicts(origin string, verdicts []Verdict) {
	m.judge.remote.set(origin, verdicts)
}

// ForgetOrigin drops every verdict of replica origin, for when it leaves or dies.
func (m *Monitor) ForgetOrigin(origin string) {
	m.SetRemoteVerdicts(origin, nil)
}

// RemoteOrigins lists the replicas that currently hold verdicts, sorted.
func (m *Monitor) RemoteOrigins() []string { return m.judge.remote.origins() }

// SetLiveReplicas tells the Monitor how many router replicas are live,
// counting this one; the gossip membership knows. It decides how many
// replicas' verdicts take a worker out without this replica's own evidence
// (see quorum). Until it is called the Monitor assumes it is alone. Values
// below 1 count as 1. Cheap when n is unchanged.
func (m *Monitor) SetLiveReplicas(n int) { m.judge.remote.setLive(n) }

// SetPeerContact tells the Monitor how to learn whether this replica hears
// its peers. Without it, no failure is ever put down to isolation.
func (m *Monitor) SetPeerContact(f PeerContact) { m.judge.isolation.peers.Store(&f) }

// CutOff reports whether this replica looks cut off: its latest failed
// probes came while it heard no peer and no worker, and neither has been
// heard from since.
func (m *Monitor) CutOff() bool { return m.judge.isolation.cutOff.Load() }

// Stalls returns how many times this replica was seen stalled (a heartbeat at
// least a second late) and how long those stalls lasted in all.
func (m *Monitor) Stalls() (count uint64, total time.Duration) { return m.judge.stalls.stats() }
