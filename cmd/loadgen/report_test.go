package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReportCountsMatchWhatTheServerAnswered(t *testing.T) {
	server := newFakeServer(t, 3)
	// Request n misbehaves by n mod 10: 503, cut stream, error event, no usage; the rest succeed.
	server.fault = func(req fakeRequest) fault {
		return map[int]fault{1: faultStatus503, 4: faultCut, 7: faultStreamError, 8: faultNoUsage}[req.n%10]
	}
	tr := newTestRun(t, server.url, newVirtualClock())
	const n = 40
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(i) * 10 * time.Millisecond
	}
	rep := tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
		tr.replay(ctx, start, replayPlan{records: traceAt(offsets...), rateScale: 1})
	})
	wantKinds := map[string]int{"status_503": 4, kindStreamCut: 4, kindStreamError: 4}
	if rep.Requests != n || rep.Errors != 12 || rep.Succeeded != 28 || !maps.Equal(rep.ErrorsByKind, wantKinds) {
		t.Fatalf("requests %d errors %d succeeded %d by kind %v; want %d, 12, 28, %v",
			rep.Requests, rep.Errors, rep.Succeeded, rep.ErrorsByKind, n, wantKinds)
	}
	if rep.MissingUsage != 4 {
		t.Fatalf("missing usage %d, want 4", rep.MissingUsage)
	}
	if !maps.Equal(rep.PerWorker, server.perWorker) || len(rep.PerWorker) != 3 {
		t.Fatalf("per worker %v, the server answered %v", rep.PerWorker, server.perWorker)
	}
	if rep.PromptTokens != server.prompt || rep.CachedTokens != server.cached || server.cached == 0 {
		t.Fatalf("prompt/cached tokens %d/%d, the server sent %d/%d", rep.PromptTokens, rep.CachedTokens, server.prompt, server.cached)
	}
	if want := float64(server.cached) / float64(server.prompt); rep.CachedTokenRatio != want {
		t.Fatalf("cached ratio %v, want %v", rep.CachedTokenRatio, want)
	}
	// 24 successes with usage stream 5 tokens each; the 4 without usage count their 5 events.
	if rep.CompletionTokens != 28*5 {
		t.Fatalf("completion tokens %d, want %d", rep.CompletionTokens, 28*5)
	}
	wantRPS := float64(28) / (390 * time.Millisecond).Seconds()
	if rep.DurationS != 0.39 || rep.ThroughputRPS != round3(wantRPS) {
		t.Fatalf("duration %v s, throughput %v; want 0.39 s, %v (successes per second)", rep.DurationS, rep.ThroughputRPS, round3(wantRPS))
	}
}

func TestReportPercentilesComeFromSuccesses(t *testing.T) {
	c := newCollector(1)
	for i, ms := range []int{10, 20, 30, 40, 1000} {
		r := result{status: 200, ttft: time.Duration(ms) * time.Millisecond, latency: time.Duration(2*ms) * time.Millisecond, turn: -1}
		if i == 4 {
			r.errKind = kindStreamCut // a failure's timings are left out
		}
		c.add(r)
	}
	c.add(result{cancelled: true})
	rep := c.report(modeReplay, []string{"t"}, 0, time.Second)
	if rep.TTFTP50MS != 25 || rep.TTFTP99MS != 39.7 || rep.LatencyP50MS != 50 || rep.Requests != 5 || rep.Cancelled != 1 {
		t.Fatalf("report %+v", rep)
	}
}

// The JSON keys are a contract with scripts: these must all be there, and nothing unlisted.
func TestReportJSONKeys(t *testing.T) {
	rep := newCollector(1).report(modeAgentic, []string{"t"}, 0, time.Second)
	path := filepath.Join(t.TempDir(), "report.json")
	if err := rep.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	required := []string{"requests", "errors", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "throughput_rps", "cached_token_ratio", "per_worker"}
	extra := []string{"mode", "target", "errors_by_kind", "succeeded", "cancelled", "duration_s", "tokens_per_sec",
		"latency_p50_ms", "latency_p99_ms", "schedule_lag_p99_ms", "prompt_tokens", "cached_tokens",
		"completion_tokens", "followup_cached_token_ratio", "missing_usage", "failovers"}
	want := slices.Sorted(slices.Values(append(required, extra...)))
	if got := slices.Sorted(maps.Keys(decoded)); !slices.Equal(got, want) {
		t.Fatalf("JSON keys %v\nwant      %v", got, want)
	}
	if _, ok := decoded["per_worker"].(map[string]any); !ok {
		t.Fatalf("per_worker is %T, want an object", decoded["per_worker"])
	}
}

func TestReportTable(t *testing.T) {
	c := newCollector(1)
	c.add(result{status: 200, worker: "w1", ttft: time.Millisecond, latency: time.Second, usage: &usage{100, 5, 25}, turn: -1})
	c.add(result{status: 503, errKind: "status_503", turn: -1})
	var out bytes.Buffer
	if err := c.report(modeReplay, []string{"http://127.0.0.1:1/v1/completions"}, 0, time.Second).writeTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"loadgen replay", "2 (succeeded 1, errors 1, cancelled 0)", "25.0% (25 of 100 prompt tokens)",
		"status_503 1", "unknown 1, w1 1", "schedule lag"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, out.String())
		}
	}
}
