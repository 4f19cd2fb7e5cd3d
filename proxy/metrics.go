package proxy

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// durationBuckets are the upper bounds, in seconds, of the request-path
// duration histograms: Prometheus-style le buckets, from a cached short
// answer to --request-timeout-secs' default.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// routingBuckets are the bounds of the time to a request's first worker, in seconds: the router's
// own share of a request, from tens of microseconds to an admission queue's wait.
var routingBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 5, 30}

// tokenBuckets are the bounds of the time per output token, in seconds.
var tokenBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2.5}

// Metrics are the request-path metrics of one replica, under the reference
// router's names so existing dashboards keep working. Each replica has its
// own metrics.Set, so tests can run several replicas in one process. The
// request path only increments counters made ahead of it.
type Metrics struct {
	set              *metrics.Set
	retries          *metrics.Counter
	retriesExhausted *metrics.Counter
	cacheHits        *metrics.Counter
	cacheMisses      *metrics.Counter
	loadBalanced     *metrics.Counter
	disconnects      *metrics.Counter
	underflows       *metrics.Counter
	streamErrors     *metrics.Counter
	migrations       migrationMetrics
	preemptions      preemptionMetrics
	ttft             *metrics.PrometheusHistogram
	routing          *metrics.PrometheusHistogram
	tpot             *metrics.PrometheusHistogram
	pdDuration       *metrics.PrometheusHistogram
	// per endpoint, made once
	requests  []*metrics.Counter
	durations []*metrics.PrometheusHistogram

	mu      sync.Mutex
	errors  map[errorKey]*metrics.Counter // made on first use: errors are not the hot path
	workers map[string]*workerCounters    // by worker URL, the label of their series
}

type errorKey struct {
	ep      int
	status  int
	errType string
}

// workerCounters are the per-worker series of one registered worker.
type workerCounters struct {
	processed *metrics.Counter
	decisions map[string]*metrics.Counter // per policy
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

func newMetrics(set *metrics.Set) *Metrics {
	m := &Metrics{
		set:              set,
		retries:          set.NewCounter("vllm_router_retries_total"),
		retriesExhausted: set.NewCounter("vllm_router_retries_exhausted_total"),
		cacheHits:        set.NewCounter("vllm_router_cache_hits_total"),
		cacheMisses:      set.NewCounter("vllm_router_cache_misses_total"),
		loadBalanced:     set.NewCounter("vllm_router_load_balancing_events_total"),
		disconnects:      set.NewCounter("vllm_router_client_disconnects_total"),
		underflows:       set.NewCounter("vllm_router_load_underflows_total"),
		streamErrors:     set.NewCounter("vllm_router_stream_errors_total"),
		ttft:             set.NewPrometheusHistogramExt("vllm_router_time_to_first_token_seconds", durationBuckets),
		routing:          set.NewPrometheusHistogramExt("vllm_router_routing_duration_seconds", routingBuckets),
		tpot:             set.NewPrometheusHistogramExt("vllm_router_time_per_output_token_seconds", tokenBuckets),
		pdDuration:       set.NewPrometheusHistogramExt("vllm_router_pd_request_duration_seconds", durationBuckets),
		migrations:       newMigrationMetrics(set),
		preemptions:      newPreemptionMetrics(set),
		errors:           map[errorKey]*metrics.Counter{},
		workers:          map[string]*workerCounters{},
	}
	for _, ep := range wire.Endpoints {
		m.requests = append(m.requests, set.NewCounter(fmt.Sprintf(`vllm_router_requests_total{route=%q}`, ep.Path)))
		m.durations = append(m.durations, set.NewPrometheusHistogramExt(
			fmt.Sprintf(`vllm_router_request_duration_seconds{route=%q}`, ep.Path), durationBuckets))
	}
	m.preinitErrors()
	return m
}

// request counts one finished inference request as its client saw it: its
// status, and errType when it failed (a stream cut after its first byte is
// an error whatever its status).
func (m *Metrics) request(ep *wire.Endpoint, status int, errType string, start time.Time) {
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

// decision counts a routing decision's cache outcome.
func (m *Metrics) decision(d affinity.Decision) {
	if d.Hit {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
	if d.Shed {
		m.loadBalanced.Inc()
	}
}

// forWorker returns the counters of worker w, making them on first use.
// The policies are those whose decisions are counted.
func (m *Metrics) forWorker(w Worker, policies []string) *workerCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.workers[w.URL]; ok {
		return c
	}
	c := &workerCounters{decisions: map[string]*metrics.Counter{}}
	name := fmt.Sprintf(`vllm_router_processed_requests_total{worker=%q}`, w.URL)
	c.processed, c.names = m.set.NewCounter(name), []string{name}
	for _, p := range policies {
		name := fmt.Sprintf(`vllm_router_policy_decisions_total{policy=%q,worker=%q}`, p, w.URL)
		c.decisions[p], c.names = m.set.NewCounter(name), append(c.names, name)
	}
	m.workers[w.URL] = c
	return c
}

// syncWorkers keeps one load and one health gauge per registered worker,
// and drops every series of a worker that left.
func (m *Metrics) syncWorkers(v *view, loads *affinity.LoadTable, eligible func(affinity.WorkerID) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	present := make(map[string]bool, len(v.members))
	for _, w := range v.members {
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
	for id, w := range v.members {
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
