package proxy

import (
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

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
