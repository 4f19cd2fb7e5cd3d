package main

import (
	"fmt"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// workerMetrics are the worker's Prometheus metrics: vLLM's names for what a router scrapes, and
// workersim_* counters for what tests and chaos scenarios assert. Safe for concurrent use.
type workerMetrics struct {
	set          *metrics.Set
	requests     map[string]*metrics.Counter // by API path
	failed       map[string]*metrics.Counter // by reason
	cancelled    *metrics.Counter
	success      *metrics.Counter
	promptTokens *metrics.Counter
	pdPrefill    *metrics.Counter
	pdDecode     *metrics.Counter
	latency      engineLatency
}

// engineLatency is what the engine itself took per request, under vLLM's names: from a request's
// arrival at the engine to its first token and to its end. It is read on engine time divided by
// the time scale, so it holds the engine's queue and compute and none of the worker process's own
// scheduling; a router's or client's figure less this one is what lies outside the engine.
type engineLatency struct {
	firstToken *metrics.PrometheusHistogram
	e2e        *metrics.PrometheusHistogram
}

// vLLM's buckets for these two histograms, in seconds.
var (
	firstTokenBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240,
		480, 960, 1920, 7680}
)

// Reasons a request fails, the label values of workersim_requests_failed_total.
const (
	failBadRequest    = "bad_request"
	failModelNotFound = "model_not_found"
	failInjected      = "injected_fault"
	failShutdown      = "shutdown"
	// failResponseNotFound: previous_response_id names a response this worker does not hold.
	failResponseNotFound = "response_not_found"
)

func newWorkerMetrics(model string, blockTokens int, stats *engineStats, currentFault func() faultMode) *workerMetrics {
	s := metrics.NewSet()
	m := &workerMetrics{
		set:          s,
		requests:     make(map[string]*metrics.Counter),
		failed:       make(map[string]*metrics.Counter),
		cancelled:    s.NewCounter("workersim_requests_cancelled_total"),
		success:      s.NewCounter(modelMetric("vllm:request_success_total", model, `finished_reason="length"`)),
		promptTokens: s.NewCounter(modelMetric("vllm:prompt_tokens_total", model, "")),
		pdPrefill:    s.NewCounter(`workersim_pd_requests_total{phase="prefill"}`),
		pdDecode:     s.NewCounter(`workersim_pd_requests_total{phase="decode"}`),
		latency: engineLatency{
			firstToken: s.NewPrometheusHistogramExt(modelMetric("vllm:time_to_first_token_seconds", model, ""), firstTokenBuckets),
			e2e:        s.NewPrometheusHistogramExt(modelMetric("vllm:e2e_request_latency_seconds", model, ""), e2eBuckets),
		},
	}
	for _, path := range inferencePaths {
		m.requests[path] = s.NewCounter(fmt.Sprintf("workersim_requests_total{path=%q}", path))
	}
	for _, reason := range []string{failBadRequest, failModelNotFound, failInjected, failShutdown, failResponseNotFound} {
		m.failed[reason] = s.NewCounter(fmt.Sprintf("workersim_requests_failed_total{reason=%q}", reason))
	}
	m.registerEngineGauges(model, blockTokens, stats)
	m.registerFaultGauges(currentFault)
	return m
}

func (m *workerMetrics) registerEngineGauges(model string, blockTokens int, st *engineStats) {
	gauges := map[string]func() float64{
		"vllm:num_requests_running":       func() float64 { return float64(st.running.Load()) },
		"vllm:num_requests_waiting":       func() float64 { return float64(st.waiting.Load()) },
		"vllm:kv_cache_usage_perc":        st.kvUsage,
		"vllm:prefix_cache_queries_total": func() float64 { return float64(st.prefixQueries.Load()) },
		"vllm:prefix_cache_hits_total":    func() float64 { return float64(st.prefixHits.Load()) },
		// Counted at every engine step, as vLLM does, so a router sees a long non-streamed
		// generation progress before it ends.
		"vllm:generation_tokens_total": func() float64 { return float64(st.generated.Load()) },
		"vllm:num_preemptions_total":   func() float64 { return float64(st.preemptions.Load()) },
	}
	for name, f := range gauges {
		m.set.NewGauge(modelMetric(name, model, ""), f)
	}
	m.set.NewGauge("workersim_prefill_computed_tokens_total", func() float64 { return float64(st.computedTokens.Load()) })
	m.set.NewGauge("workersim_kv_transfer_tokens_total", func() float64 { return float64(st.transferred.Load()) })
	info := fmt.Sprintf(`vllm:cache_config_info{block_size="%d",num_gpu_blocks="%d"}`,
		blockTokens, st.numGPUBlocks.Load())
	m.set.NewGauge(info, func() float64 { return 1 })
}

// registerFaultGauges exposes the current fault as workersim_fault{mode="..."} 1 (0 for the
// other modes), so a chaos scenario can see what it injected.
func (m *workerMetrics) registerFaultGauges(current func() faultMode) {
	for _, mode := range []faultMode{faultNone, faultCrash, faultErrors, faultWedge, faultDegrade, faultSlowHealth, faultMuteKV} {
		m.set.NewGauge(fmt.Sprintf("workersim_fault{mode=%q}", mode), func() float64 {
			if current() == mode {
				return 1
			}
			return 0
		})
	}
}

// modelMetric names a metric carrying vLLM's model_name label and optional extra labels.
func modelMetric(name, model, extra string) string {
	labels := `model_name="` + labelEscaper.Replace(model) + `"`
	if extra != "" {
		labels = extra + "," + labels
	}
	return name + "{" + labels + "}"
}

// labelEscaper escapes a Prometheus label value.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (m *workerMetrics) fail(reason string) {
	m.failed[reason].Inc()
}
