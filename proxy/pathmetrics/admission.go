package pathmetrics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvrouter/kvrouter/admission"
)

// maxTenantSeries bounds the tenants that get series of their own; the
// others share tenant="other", so that a stranger's made-up tenants cannot
// grow the metrics.
const maxTenantSeries = 32

// Admission are the vllm_router_admission_* families: per class
// gauges of what waits and runs, and per class and tenant counters of what
// was admitted or refused and how long it waited.
type Admission struct {
	set     *metrics.Set
	mu      sync.Mutex
	tenants map[string]bool
	series  map[admissionKey]*admissionSeries
}

type admissionKey struct{ class, tenant string }

type admissionSeries struct {
	labels    string // class and tenant, as the series carry them
	admitted  *metrics.Counter
	queueTime *metrics.PrometheusHistogram
	refused   map[string]*metrics.Counter // by reason
}

// NewAdmission makes the admission families in set.
func NewAdmission(set *metrics.Set) *Admission {
	return &Admission{set: set, tenants: map[string]bool{}, series: map[admissionKey]*admissionSeries{}}
}

// Watch registers the gauges read from s's stats at each scrape.
func (m *Admission) Watch(s *admission.Scheduler) {
	m.set.NewGauge("vllm_router_admission_limit", func() float64 { return float64(s.Stats().Limit) })
	m.set.NewGauge("vllm_router_admission_tenant_bytes", func() float64 { return float64(s.Stats().TenantBytes) })
	for i := range s.Classes().Len() {
		name := s.Classes().Name(admission.Class(i))
		class := func(f func(admission.ClassStats) int) func() float64 {
			return func() float64 { return float64(f(s.Stats().Classes[i])) }
		}
		m.set.NewGauge(fmt.Sprintf(`vllm_router_admission_queued{class=%q}`, name),
			class(func(c admission.ClassStats) int { return c.Queued }))
		m.set.NewGauge(fmt.Sprintf(`vllm_router_admission_in_flight{class=%q}`, name),
			class(func(c admission.ClassStats) int { return c.InFlight }))
		m.set.NewGauge(fmt.Sprintf(`vllm_router_admission_peer_queued{class=%q}`, name),
			class(func(c admission.ClassStats) int { return c.PeerQueued }))
	}
}

// Decided counts a ticket's outcome under its class and tenant.
func (m *Admission) Decided(class, tenant string, tk *admission.Ticket) {
	s := m.seriesOf(class, tenant)
	s.queueTime.Update(tk.Waited().Seconds())
	if err := tk.Err(); err == nil {
		s.admitted.Inc()
	} else {
		m.refusedBy(s, err)
	}
}

// refusedBy counts a refusal; apart, so that the admitted ticket's path
// does not allocate the Refusal pointer errors.As needs on the heap.
func (m *Admission) refusedBy(s *admissionSeries, err error) {
	var r *admission.Refusal
	if errors.As(err, &r) {
		m.refused(s, r.Reason.String()).Inc()
	}
}

func (m *Admission) seriesOf(class, tenant string) *admissionSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.tenants[tenant] {
		if len(m.tenants) >= maxTenantSeries {
			tenant = "other"
		}
		m.tenants[tenant] = true
	}
	k := admissionKey{class, tenant}
	s := m.series[k]
	if s == nil {
		labels := fmt.Sprintf(`{class=%q,tenant=%q}`, class, tenant)
		s = &admissionSeries{labels: labels, admitted: m.set.NewCounter("vllm_router_admission_admitted_total" + labels),
			queueTime: m.set.NewPrometheusHistogramExt("vllm_router_admission_queue_seconds"+labels, DurationBuckets),
			refused:   map[string]*metrics.Counter{}}
		m.series[k] = s
	}
	return s
}

func (m *Admission) refused(s *admissionSeries, reason string) *metrics.Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := s.refused[reason]
	if c == nil {
		c = m.set.NewCounter(fmt.Sprintf(`vllm_router_admission_refused_total%s,reason=%q}`, s.labels[:len(s.labels)-1], reason))
		s.refused[reason] = c
	}
	return c
}
