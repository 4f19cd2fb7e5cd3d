package health

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEngineMetricsSumsTheCountersOfEveryModel(t *testing.T) {
	page := `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="a"} 1000.0
vllm:generation_tokens_total{engine="0",model_name="b {with \"braces\"} 7"} 234
vllm:generation_tokens_created{engine="0",model_name="a"} 1.7e+09
vllm:prompt_tokens_total{model_name="a"} 5e3 1712345678000
vllm:num_requests_running{model_name="a"} 3
vllm:num_requests_running{model_name="b"} 4
vllm:num_requests_waiting{model_name="a"} 99
vllm:generation_tokens_total{model_name="c"} NaN
vllm:generation_tokens_total_bogus 1e9
vllm:generation_tokens_total
   
`
	got, err := parseEngineMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := engineReading{tokens: 1000 + 234 + 5000, running: 7, waiting: 99, hasTokens: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseEngineMetrics = %+v, want %+v", got, want)
	}
	if got, _ := parseEngineMetrics(strings.NewReader("sglang:generation_tokens_total 5\n")); got.hasTokens {
		t.Fatal("a page without vLLM's token counters read as one with them")
	}
}

// endlessReader yields line forever and counts what it handed out.
type endlessReader struct {
	line []byte
	read int
}

func (r *endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.line[(r.read+i)%len(r.line)]
	}
	r.read += len(p)
	return len(p), nil
}

func TestReadingMetricsIsBounded(t *testing.T) {
	lines := &endlessReader{line: []byte("# a comment line, again and again\n")}
	if _, err := parseEngineMetrics(lines); !errors.Is(err, errMetricsTooLarge) {
		t.Fatalf("an endless page: err = %v, want errMetricsTooLarge", err)
	}
	if lines.read > maxMetricsBody+maxMetricsLine {
		t.Fatalf("read %d bytes of an endless page, want at most about %d", lines.read, maxMetricsBody)
	}
	oneLine := &endlessReader{line: []byte("x")}
	if _, err := parseEngineMetrics(oneLine); !errors.Is(err, errMetricsTooLarge) {
		t.Fatalf("an endless line: err = %v, want errMetricsTooLarge", err)
	}
	if oneLine.read > 2*maxMetricsLine {
		t.Fatalf("buffered %d bytes of one endless line, want at most about %d", oneLine.read, maxMetricsLine)
	}
}

func TestEndlessMetricsPageFailsTheScrape(t *testing.T) {
	fw := startFakeWorker(t)
	fw.endless.Store(true)
	p := workerClient{timeout: 5 * time.Second}
	pt, err := newProbeTarget(fw.url, "/health")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.scrape(context.Background(), pt, 5*time.Second); !errors.Is(err, errMetricsTooLarge) {
		t.Fatalf("scraping an endless page: err = %v, want errMetricsTooLarge", err)
	}
}

func TestScrapeReadsALoopbackEngine(t *testing.T) {
	fw := startFakeWorker(t)
	fw.tokens.Store(77)
	fw.running.Store(2)
	pt, _ := newProbeTarget(fw.url+"/", "/health")
	got, err := workerClient{}.scrape(context.Background(), pt, 2*time.Second)
	if err != nil || got.tokens != 77 || got.running != 2 {
		t.Fatalf("scrape = %+v, %v; want 77 tokens and 2 running", got, err)
	}
	fw.metricsCode.Store(404)
	if _, err := (workerClient{}).scrape(context.Background(), pt, 2*time.Second); err == nil {
		t.Fatal("a 404 /metrics read as a page")
	}
}

func TestEngineCountersThatFellAreNoProgress(t *testing.T) {
	var w worker
	w.lastProgress.Store(notSet)
	w.heardAt.Store(notSet)
	w.engineAt.Store(notSet)
	every := int64(10 * time.Second)
	w.recordEngine(0, engineReading{tokens: 500, hasTokens: true}, true, every)
	w.recordEngine(every, engineReading{tokens: 20, hasTokens: true}, true, every) // the engine restarted
	if w.engineAt.Load() != notSet {
		t.Fatal("a counter that fell counted as progress")
	}
	w.recordEngine(2*every, engineReading{tokens: 30, hasTokens: true}, true, every)
	if w.engineAt.Load() != every {
		t.Fatalf("engine progress credited at %d, want at the previous reading, %d", w.engineAt.Load(), every)
	}
	w.recordEngine(7*every, engineReading{tokens: 40, hasTokens: true}, true, every)
	if w.engineAt.Load() != every {
		t.Fatal("a rise over a stale baseline counted as recent progress")
	}
	w.recordEngine(8*every, engineReading{}, false, every)
	w.recordEngine(9*every, engineReading{tokens: 50, hasTokens: true}, true, every)
	if w.engineAt.Load() != every {
		t.Fatal("a rise across a failed scrape counted as progress")
	}
}

// FuzzParseEngineMetrics feeds arbitrary pages, as a misbehaving worker might
// send, and checks that parsing neither panics nor reads a counter that the
// page does not hold.
func FuzzParseEngineMetrics(f *testing.F) {
	f.Add([]byte("vllm:generation_tokens_total{model_name=\"m\"} 12\nvllm:num_requests_running 1\n"))
	f.Add([]byte("vllm:generation_tokens_total{a=\"}\\\"\"} 1e308\nvllm:prompt_tokens_total 1e308\n"))
	f.Add([]byte("{\n}} 1\n# vllm:generation_tokens_total 5\n\x00"))
	f.Fuzz(func(t *testing.T, page []byte) {
		got, err := parseEngineMetrics(bytes.NewReader(page))
		if err != nil {
			return
		}
		if got.hasTokens && !bytes.Contains(page, metricGenerationTokens) && !bytes.Contains(page, metricPromptTokens) {
			t.Fatalf("hasTokens %v for a page %q", got.hasTokens, page)
		}
		if math.IsNaN(got.tokens) || math.IsNaN(got.running) {
			t.Fatalf("NaN read from %q: %+v", page, got)
		}
	})
}

func TestParseEngineMetricsReadsTheSaturationSignal(t *testing.T) {
	page := "vllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 3\n" +
		"vllm:kv_cache_usage_perc{model_name=\"a\"} 0.4\nvllm:kv_cache_usage_perc{model_name=\"b\"} 0.9\n" +
		"sglang:num_queue_reqs 1\nsglang:num_running_reqs 5\n"
	got, err := parseEngineMetrics(strings.NewReader(page))
	if err != nil || got.waiting != 6 || got.kvUsage != 0.9 || got.running != 5 {
		t.Fatalf("parseEngineMetrics = %+v, %v; want 6 waiting (vLLM's and SGLang's), the fullest KV cache, 5 running", got, err)
	}
}

func TestABusyWorkersEngineIsReadEveryEngineScrapeInterval(t *testing.T) {
	fw := startFakeWorker(t)
	cfg := wedgeConfig()
	cfg.EngineScrapeInterval = 2 * time.Second
	m, clock := newTestMonitor(t, cfg, Target{ID: 1, URL: fw.url})
	second(m, clock)
	if fw.scrapes.Load() != 0 || len(m.Engines().Readings(nil)) != 0 {
		t.Fatal("an idle worker is not read for the saturation signal")
	}
	a := begin(t, m, 1)
	defer a.End(OutcomeSuccess)
	fw.running.Store(4)
	fw.queued.Store(3)
	a.Progress(1) // it is not silent: only the saturation signal reads it
	second(m, clock)
	rs := m.Engines().Readings(nil)
	if fw.scrapes.Load() != 1 || len(rs) != 1 || rs[0].Running != 4 || rs[0].Waiting != 3 || rs[0].KVUsage != 0.5 {
		t.Fatalf("after a second busy: %d scrapes, readings %+v; want one reading of 4 running, 3 waiting, KV 0.5",
			fw.scrapes.Load(), rs)
	}
	a.Progress(1)
	second(m, clock)
	if fw.scrapes.Load() != 1 {
		t.Fatal("read again before EngineScrapeInterval")
	}
	a.Progress(1)
	second(m, clock)
	if fw.scrapes.Load() != 2 {
		t.Fatalf("%d scrapes after EngineScrapeInterval, want 2", fw.scrapes.Load())
	}
}
