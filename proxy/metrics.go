package proxy

import (
	"fmt"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/affinity"
)

// Metrics are the request-path metrics of one replica, under the reference
// router's names so existing dashboards keep working. Each replica has its
// own metrics.Set, so tests can run several replicas in one process.
type Metrics struct {
	set          *metrics.Set
	retries      *metrics.Counter
	cacheHits    *metrics.Counter
	cacheMisses  *metrics.Counter
	loadBalanced *metrics.Counter
	disconnects  *metrics.Counter
	underflows   *metrics.Counter
	streamErrors *metrics.Counter
	// per endpoint, made once: the request path only increments them
	requests  [2]*metrics.Counter
	durations [2]*metrics.Histogram

	mu     sync.Mutex
	gauges map[affinity.WorkerID][]string
}

func newMetrics(set *metrics.Set) *Metrics {
	m := &Metrics{
		set:          set,
		retries:      set.NewCounter("vllm_router_retries_total"),
		cacheHits:    set.NewCounter("vllm_router_cache_hits_total"),
		cacheMisses:  set.NewCounter("vllm_router_cache_misses_total"),
		loadBalanced: set.NewCounter("vllm_router_load_balancing_events_total"),
		disconnects:  set.NewCounter("vllm_router_client_disconnects_total"),
		underflows:   set.NewCounter("vllm_router_load_underflows_total"),
		streamErrors: set.NewCounter("vllm_router_stream_errors_total"),
		gauges:       map[affinity.WorkerID][]string{},
	}
	for _, ep := range []endpoint{completions, chatCompletions} {
		m.requests[ep] = set.NewCounter(fmt.Sprintf(`vllm_router_requests_total{route=%q}`, ep.path()))
		m.durations[ep] = set.NewHistogram(fmt.Sprintf(`vllm_router_request_duration_seconds{route=%q}`, ep.path()))
	}
	return m
}

// request counts one finished inference request as its client saw it: a
// stream cut after its first byte is an error whatever its status.
func (m *Metrics) request(ep endpoint, status int, cut bool, start time.Time) {
	m.requests[ep].Inc()
	m.durations[ep].UpdateDuration(start)
	if status >= 400 || cut {
		m.set.GetOrCreateCounter(fmt.Sprintf(`vllm_router_request_errors_total{route=%q,status="%d"}`, ep.path(), status)).Inc()
	}
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

// syncWorkers keeps one load and one health gauge per registered worker.
func (m *Metrics) syncWorkers(v *view, loads *affinity.LoadTable, eligible func(affinity.WorkerID) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, names := range m.gauges {
		if _, ok := v.members[id]; !ok {
			for _, n := range names {
				m.set.UnregisterMetric(n)
			}
			delete(m.gauges, id)
		}
	}
	for id, w := range v.members {
		if _, ok := m.gauges[id]; ok {
			continue
		}
		load := loads.Get(id)
		loadName := fmt.Sprintf(`vllm_router_worker_load{worker=%q,role=%q}`, w.URL, w.Role)
		healthName := fmt.Sprintf(`vllm_router_worker_health{worker=%q,role=%q}`, w.URL, w.Role)
		m.set.GetOrCreateGauge(loadName, func() float64 { return float64(load.Merged()) })
		m.set.GetOrCreateGauge(healthName, func() float64 {
			if eligible(id) {
				return 1
			}
			return 0
		})
		m.gauges[id] = []string{loadName, healthName}
	}
}
