package exposition

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

var _ = Describe(map[string]string{
	"exposition_test_requests_total":   "Requests the test made.",
	"exposition_test_duration_seconds": `Durations, with a backslash \ and a second` + "\nline.",
})

func TestMain(m *testing.M) { leaktest.Main(m) }

func TestWriteFillsTheHelpOfDescribedFamiliesOnly(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	set := metrics.NewSet()
	set.NewCounter(`exposition_test_requests_total{route="/a"}`).Inc()
	set.NewCounter(`exposition_test_requests_total{route="/b"}`)
	set.NewPrometheusHistogram("exposition_test_duration_seconds").Update(0.2)
	set.NewCounter("exposition_test_undescribed_total")
	var out bytes.Buffer
	Write(&out, set)
	text := out.String()
	for _, want := range []string{
		"# HELP exposition_test_requests_total Requests the test made.\n",
		`# HELP exposition_test_duration_seconds Durations, with a backslash \\ and a second\nline.` + "\n",
		"# HELP exposition_test_undescribed_total\n",
		`exposition_test_requests_total{route="/a"} 1` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus cannot parse it: %v\n%s", err, text)
	}
	if got := families["exposition_test_duration_seconds"].GetHelp(); got != `Durations, with a backslash \ and a second`+"\nline." {
		t.Errorf("the parsed help is %q", got)
	}
	if got := len(families["exposition_test_duration_seconds"].GetMetric()[0].GetHistogram().GetBucket()); got == 0 {
		t.Error("the histogram lost its buckets")
	}
}

func TestDescribingAFamilyTwiceDifferentlyPanics(t *testing.T) {
	Describe(map[string]string{"exposition_test_twice": "once"})
	Describe(map[string]string{"exposition_test_twice": "once"}) // the same text is fine
	defer func() {
		if recover() == nil {
			t.Fatal("a second, different text was accepted")
		}
	}()
	Describe(map[string]string{"exposition_test_twice": "otherwise"})
}
