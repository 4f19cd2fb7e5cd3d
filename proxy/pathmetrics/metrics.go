package pathmetrics

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// DurationBuckets are the upper bounds, in seconds, of the request-path
// duration histograms: Prometheus-style le buckets, from a cached short
// answer to --request-timeout-secs' default.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// routingBuckets are the bounds of the time to a request's first worker, in seconds: the router's
// own share of a request, from tens of microseconds to an admission queue's wait.
var routingBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 5, 30}

// tokenBuckets are the bounds of the time per output token, in seconds.
var tokenBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2.5}

// Metrics are the request-path metrics of one replica. The exported series
// are incremented by the request path directly.
type Metrics struct {
	set              *metrics.Set
	Retries          *metrics.Counter // attempts after the first of a request or P/D phase
	RetriesExhausted *metrics.Counter // requests or phases whose every attempt failed
	cacheHits        *metrics.Counter
	cacheMisses      *metrics.Counter
	loadBalanced     *metrics.Counter
	Disconnects      *metrics.Counter // clients that left before their answer ended
	underflows       *metrics.Counter
	StreamErrors     *metrics.Counter // streams cut after their first byte
	Migrations       Migrations
	Preemptions      Preemptions
	TTFT             *metrics.PrometheusHistogram // seconds to a stream's first bytes
	Routing          *metrics.PrometheusHistogram // seconds to a request's first worker
	TPOT             *metrics.PrometheusHistogram // seconds between a stream's events
	PDDuration       *metrics.PrometheusHistogram // seconds of a disaggregated request
	// per endpoint, made once
	requests  []*metrics.Counter
	durations []*metrics.PrometheusHistogram

	mu      sync.Mutex
	errors  map[errorKey]*metrics.Counter // made on first use: errors are not the hot path
	workers map[string]*WorkerCounters    // by worker URL, the label of their series
}

type errorKey struct {
	ep      int
	status  int
	errType string
}

// WorkerCounters are the per-worker series of one registered worker.
type WorkerCounters struct {
	Processed *metrics.Counter            // attempts it answered
	Decisions map[string]*metrics.Counter // selections, per policy
	names     []string                    // every series of the worker, to unregister it
	gauged    bool                        // its load and health gauges are registered
	id        atomic.Uint32               // the worker's id now (a URL added again gets a new one)
	tally     workerTally
}

// workerTally counts, for the status page, a worker's routing outcomes and
// the tokens of the answers it gave on this replica. Cumulative: a reader
// derives rates from two readings.
type workerTally struct {
	hits, misses, tokens atomic.Uint64
}

// KnownError is one error_type of vllm_router_request_errors_total with
// the status a client gets with it: a series New makes at 0 on every route.
type KnownError struct {
	ErrType string
	Status  int
}

// New makes the metrics of a replica in set, with the error series of
// known made at 0 on every route: a counter that appears only with its
// first error hides that error from rate() and increase(), which need two
// samples, so the first failure of each kind on each replica would go
// unseen by an alert.
func New(set *metrics.Set, known []KnownError) *Metrics {
	m := &Metrics{
		set:              set,
		Retries:          set.NewCounter("vllm_router_retries_total"),
		RetriesExhausted: set.NewCounter("vllm_router_retries_exhausted_total"),
		cacheHits:        set.NewCounter("vllm_router_cache_hits_total"),
		cacheMisses:      set.NewCounter("vllm_router_cache_misses_total"),
		loadBalanced:     set.NewCounter("vllm_router_load_balancing_events_total"),
		Disconnects:      set.NewCounter("vllm_router_client_disconnects_total"),
		underflows:       set.NewCounter("vllm_router_load_underflows_total"),
		StreamErrors:     set.NewCounter("vllm_router_stream_errors_total"),
		TTFT:             set.NewPrometheusHistogramExt("vllm_router_time_to_first_token_seconds", DurationBuckets),
		Routing:          set.NewPrometheusHistogramExt("vllm_router_routing_duration_seconds", routingBuckets),
		TPOT:             set.NewPrometheusHistogramExt("vllm_router_time_per_output_token_seconds", tokenBuckets),
		PDDuration:       set.NewPrometheusHistogramExt("vllm_router_pd_request_duration_seconds", DurationBuckets),
		Migrations:       newMigrations(set),
		Preemptions:      newPreemptions(set),
		errors:           map[errorKey]*metrics.Counter{},
		workers:          map[string]*WorkerCounters{},
	}
	for _, ep := range wire.Endpoints {
		m.requests = append(m.requests, set.NewCounter(fmt.Sprintf(`vllm_router_requests_total{route=%q}`, ep.Path)))
		m.durations = append(m.durations, set.NewPrometheusHistogramExt(
			fmt.Sprintf(`vllm_router_request_duration_seconds{route=%q}`, ep.Path), DurationBuckets))
	}
	for _, ep := range wire.Endpoints {
		for _, k := range known {
			m.errorCounter(ep, k.Status, k.ErrType)
		}
	}
	return m
}

// Request counts one finished inference request as its client saw it: its
// status, and errType when it failed (a stream cut after its first byte is
// an error whatever its status).
func (m *Metrics) Request(ep *wire.Endpoint, status int, errType string, start time.Time) {
	m.requests[ep.ID].Inc()
	m.durations[ep.ID].UpdateDuration(start)
	if errType != "" {
		m.errorCounter(ep, status, errType).Inc()
	}
}

func (m *Metrics) errorCounter(ep *wire.Endpoint, status int, errType string) *metrics.Counter {
	k := errorKey{ep.ID, status, errType}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.errors[k]
	if !ok {
		c = m.set.NewCounter(fmt.Sprintf(`vllm_router_request_errors_total{route=%q,status="%d",error_type=%q}`,
			ep.Path, status, errType))
		m.errors[k] = c
	}
	return c
}

// Decision counts a routing decision's cache outcome.
func (m *Metrics) Decision(d affinity.Decision) {
	if d.Hit {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
	if d.Shed {
		m.loadBalanced.Inc()
	}
}

// Set is the metrics.Set the series are made in, for the families a
// feature of the request path makes of its own.
func (m *Metrics) Set() *metrics.Set { return m.set }

// ForWorker returns the counters of the worker at url, making them on
// first use. The policies are those whose decisions are counted.
func (m *Metrics) ForWorker(url string, policies []string) *WorkerCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.workers[url]; ok {
		return c
	}
	c := &WorkerCounters{Decisions: map[string]*metrics.Counter{}}
	name := fmt.Sprintf(`vllm_router_processed_requests_total{worker=%q}`, url)
	c.Processed, c.names = m.set.NewCounter(name), []string{name}
	for _, p := range policies {
		name := fmt.Sprintf(`vllm_router_policy_decisions_total{policy=%q,worker=%q}`, p, url)
		c.Decisions[p], c.names = m.set.NewCounter(name), append(c.names, name)
	}
	m.workers[url] = c
	return c
}

// Worker is what a worker's series are labelled with.
type Worker struct {
	URL, Role string
}

// SyncWorkers keeps one load and one health gauge per registered worker,
// of members (the registered workers by id), and drops every series of a
// worker that left.
func (m *Metrics) SyncWorkers(members map[affinity.WorkerID]Worker, loads *affinity.LoadTable, eligible func(affinity.WorkerID) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	present := make(map[string]bool, len(members))
	for _, w := range members {
		present[w.URL] = true
	}
	for url, c := range m.workers {
		if !present[url] {
			for _, n := range c.names {
				m.set.UnregisterMetric(n)
			}
			delete(m.workers, url)
		}
	}
	for id, w := range members {
		c := m.workers[w.URL]
		if c == nil {
			continue
		}
		c.id.Store(uint32(id))
		if c.gauged {
			continue
		}
		c.gauged = true
		loadName := fmt.Sprintf(`vllm_router_worker_load{worker=%q,role=%q}`, w.URL, w.Role)
		backlogName := fmt.Sprintf(`vllm_router_worker_prefill_backlog_bytes{worker=%q,role=%q}`, w.URL, w.Role)
		healthName := fmt.Sprintf(`vllm_router_worker_health{worker=%q,role=%q}`, w.URL, w.Role)
		merged := func(of func(*affinity.Load) int64) func() float64 {
			return func() float64 {
				if l := loads.Lookup(affinity.WorkerID(c.id.Load())); l != nil {
					return float64(of(l))
				}
				return 0
			}
		}
		m.set.GetOrCreateGauge(loadName, merged((*affinity.Load).Merged))
		m.set.GetOrCreateGauge(backlogName, merged((*affinity.Load).MergedBacklog))
		m.set.GetOrCreateGauge(healthName, func() float64 {
			if eligible(affinity.WorkerID(c.id.Load())) {
				return 1
			}
			return 0
		})
		c.names = append(c.names, loadName, backlogName, healthName)
	}
}

// Migrations count the streams that resumed, and how long a resume took.
type Migrations struct {
	Resumed, Failed, Unresumable *metrics.Counter
	Seconds                      *metrics.PrometheusHistogram // from the cut to the continuation's first bytes
}

func newMigrations(set *metrics.Set) Migrations {
	c := func(result string) *metrics.Counter {
		return set.NewCounter(fmt.Sprintf(`vllm_router_stream_migrations_total{result=%q}`, result))
	}
	return Migrations{Resumed: c("resumed"), Failed: c("failed"), Unresumable: c("unresumable"),
		Seconds: set.NewPrometheusHistogramExt("vllm_router_stream_migration_seconds", DurationBuckets)}
}

// Preemptions count the preemptions by how they went, and how long a
// preempted stream paused.
type Preemptions struct {
	Marked, NoBorrower, Resumed, Failed, Unresumable *metrics.Counter
	Pause                                            *metrics.PrometheusHistogram // from giving way to the continuation's first bytes
}

func newPreemptions(set *metrics.Set) Preemptions {
	c := func(result string) *metrics.Counter {
		return set.NewCounter(fmt.Sprintf(`vllm_router_preemptions_total{result=%q}`, result))
	}
	return Preemptions{Marked: c("asked"), NoBorrower: c("no_borrower"), Resumed: c("resumed"), Failed: c("failed"),
		Unresumable: c("unresumable"), Pause: set.NewPrometheusHistogramExt("vllm_router_preemption_pause_seconds", DurationBuckets)}
}
