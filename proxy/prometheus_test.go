package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// TestMetricsParseAsPrometheusWithLeBuckets reads /metrics with
// Prometheus' own text parser: every duration is a histogram with le
// buckets, so histogram_quantile(... by (le)) works on it.
func TestMetricsParseAsPrometheusWithLeBuckets(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	w := startFake(t, "w1")
	w.Set(fakeworker.Stream(4))
	r := startRouter(t, Config{}, w)
	readStream(t, r.url, completion("x", true))
	w.Set(fakeworker.Default())
	post(t, r.url, "/v1/completions", completion("y", false))
	_, body := get(t, r.url+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus cannot parse /metrics: %v", err)
	}
	durations := 0
	for name, f := range families {
		if !strings.HasSuffix(name, "_seconds") {
			continue
		}
		durations++
		if f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is a %v, want a histogram", name, f.GetType())
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetHistogram().GetBucket()) < 5 {
				t.Errorf("%s has %d le buckets", name, len(m.GetHistogram().GetBucket()))
			}
		}
	}
	for _, want := range []string{"vllm_router_request_duration_seconds", "vllm_router_time_to_first_token_seconds",
		"vllm_router_time_per_output_token_seconds"} {
		samples := uint64(0)
		for _, m := range families[want].GetMetric() {
			samples += m.GetHistogram().GetSampleCount()
		}
		if samples == 0 {
			t.Errorf("%s is missing or has no sample", want)
		}
	}
	if durations < 3 {
		t.Fatalf("only %d duration families", durations)
	}
}

// slowDecider takes its time over every decision, as a placer far away
// would.
type slowDecider struct{ took time.Duration }

func (d slowDecider) Decide(r *affinity.Router, req *affinity.Request, pool *affinity.Pool) (core.Decided, *affinity.Guard, error) {
	<-time.After(d.took)
	dec, g, err := r.Route(req, pool)
	return core.Decided{Decision: dec}, g, err
}

func (slowDecider) Answered(core.Decided, core.Usage) {}

// TestTheRoutingDurationHoldsTheTimeTheDecisionTook: a request whose
// decision takes 30 ms is counted once, with at least those 30 ms, in
// vllm_router_routing_duration_seconds, and no more than its whole time.
func TestTheRoutingDurationHoldsTheTimeTheDecisionTook(t *testing.T) {
	w := startFake(t, "w1")
	const took = 30 * time.Millisecond
	p, err := buildProxyWith(Config{}, affinity.PolicyCacheAware, []Worker{{ID: 1, URL: w.URL, Role: RoleRegular}},
		func(d *Deps) { d.Decider = slowDecider{took} })
	if err != nil {
		t.Fatal(err)
	}
	r := &testRouter{proxy: p, url: serveProxy(t, p), set: p.deps.Metrics}
	if resp, body := post(t, r.url, "/v1/completions", completion("x", false)); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	m := scrape(t, r)
	routing := sampleValue(t, m, "vllm_router_routing_duration_seconds_sum")
	whole := sampleValue(t, m, `vllm_router_request_duration_seconds_sum{route="/v1/completions"}`)
	if n := sampleValue(t, m, "vllm_router_routing_duration_seconds_count"); n != 1 {
		t.Fatalf("routing duration counted %v times, want 1", n)
	}
	if routing < took.Seconds() || routing > whole {
		t.Fatalf("routing took %v s, want at least %v and at most the request's %v s", routing, took.Seconds(), whole)
	}
}

// sampleValue is the value of the sample named exactly series in the
// exposition m.
func sampleValue(t *testing.T, m, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s in\n%s", series, m)
	return 0
}
