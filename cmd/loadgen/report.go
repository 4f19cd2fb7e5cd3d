package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the outcome of a run; its JSON form is what --json writes. Latency figures are over
// successful requests; throughput counts successes only.
type report struct {
	Mode   string `json:"mode"`   // "replay" or "agentic"
	Target string `json:"target"` // the endpoint, or the endpoints joined by commas
	// PerTarget counts finished requests by the target that took them, and Failovers the
	// attempts passed on to another target after a connection error (more than one --target).
	PerTarget map[string]int `json:"per_target,omitempty"`
	Failovers int64          `json:"failovers"`
	Requests  int            `json:"requests"`
	// Errors counts finished requests that failed; ErrorsByKind splits them.
	Errors       int            `json:"errors"`
	ErrorsByKind map[string]int `json:"errors_by_kind"`
	Succeeded    int            `json:"succeeded"`
	// Cancelled counts requests cut by the end of the run (Ctrl-C, --duration), not in Requests.
	Cancelled     int     `json:"cancelled"`
	DurationS     float64 `json:"duration_s"`
	ThroughputRPS float64 `json:"throughput_rps"`
	TokensPerSec  float64 `json:"tokens_per_sec"` // completion tokens of successes per second
	TTFTP50MS     float64 `json:"ttft_p50_ms"`
	TTFTP90MS     float64 `json:"ttft_p90_ms"`
	TTFTP99MS     float64 `json:"ttft_p99_ms"`
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	// ScheduleLagP99MS is how late the replay started requests against the trace (99th
	// percentile): above a few milliseconds the generator, not the target, set the pace.
	ScheduleLagP99MS float64 `json:"schedule_lag_p99_ms"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	// CachedTokenRatio is CachedTokens / PromptTokens, from the usage of successes.
	CachedTokenRatio float64 `json:"cached_token_ratio"`
	// FollowUpCachedTokenRatio is the same over agentic turns after the first (absent in replay).
	FollowUpCachedTokenRatio *float64 `json:"followup_cached_token_ratio,omitempty"`
	// MissingUsage counts successes whose stream carried no usage chunk.
	MissingUsage int            `json:"missing_usage"`
	PerWorker    map[string]int `json:"per_worker"`
}

// report computes the figures of a run that lasted elapsed.
func (c *collector) report(mode string, targets []string, failovers int64, elapsed time.Duration) report {
	c.mu.Lock()
	defer c.mu.Unlock()
	seconds := elapsed.Seconds()
	r := report{
		Mode: mode, Target: strings.Join(targets, ","), Failovers: failovers,
		Requests: c.finished, Errors: c.errors, Succeeded: c.finished - c.errors, Cancelled: c.cancelled,
		ErrorsByKind: maps.Clone(c.errorsByKind), PerWorker: maps.Clone(c.perWorker),
		DurationS:        round3(seconds),
		ThroughputRPS:    round3(ratio(float64(c.finished-c.errors), seconds)),
		TokensPerSec:     round3(ratio(float64(c.tokens.completion), seconds)),
		TTFTP50MS:        round3(percentile(c.ttftMS, 50)),
		TTFTP90MS:        round3(percentile(c.ttftMS, 90)),
		TTFTP99MS:        round3(percentile(c.ttftMS, 99)),
		LatencyP50MS:     round3(percentile(c.latencyMS, 50)),
		LatencyP99MS:     round3(percentile(c.latencyMS, 99)),
		ScheduleLagP99MS: round3(percentile(c.lagMS, 99)),
		PromptTokens:     c.tokens.prompt, CachedTokens: c.tokens.cached, CompletionTokens: c.tokens.completion,
		CachedTokenRatio: ratio(float64(c.tokens.cached), float64(c.tokens.prompt)),
		MissingUsage:     c.missingUsage,
	}
	if len(targets) > 1 {
		r.PerTarget = make(map[string]int, len(targets))
		for i, t := range targets {
			r.PerTarget[t] = c.perTarget[i]
		}
	}
	if mode == modeAgentic {
		followUp := ratio(float64(c.followUp.cached), float64(c.followUp.prompt))
		r.FollowUpCachedTokenRatio = &followUp
	}
	return r
}

// round3 keeps three decimals: microseconds of a millisecond figure, enough for any reader.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// writeJSON writes r, indented, to path.
func (r report) writeJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// writeTable prints r for a reader.
func (r report) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"target", r.Target},
		{"requests", fmt.Sprintf("%d (succeeded %d, errors %d, cancelled %d)", r.Requests, r.Succeeded, r.Errors, r.Cancelled)},
		{"duration", fmt.Sprintf("%.1f s", r.DurationS)},
		{"throughput", fmt.Sprintf("%.2f req/s, %.0f completion tok/s", r.ThroughputRPS, r.TokensPerSec)},
		{"TTFT", fmt.Sprintf("p50 %.1f ms  p90 %.1f ms  p99 %.1f ms", r.TTFTP50MS, r.TTFTP90MS, r.TTFTP99MS)},
		{"latency", fmt.Sprintf("p50 %.1f ms  p99 %.1f ms", r.LatencyP50MS, r.LatencyP99MS)},
		{"cached tokens", fmt.Sprintf("%.1f%% (%d of %d prompt tokens)", 100*r.CachedTokenRatio, r.CachedTokens, r.PromptTokens)},
	}
	if r.FollowUpCachedTokenRatio != nil {
		rows = append(rows, [2]string{"cached, turns 2+", fmt.Sprintf("%.1f%%", 100**r.FollowUpCachedTokenRatio)})
	}
	if r.Mode == modeReplay {
		rows = append(rows, [2]string{"schedule lag", fmt.Sprintf("p99 %.1f ms", r.ScheduleLagP99MS)})
	}
	if r.MissingUsage > 0 {
		rows = append(rows, [2]string{"missing usage", fmt.Sprint(r.MissingUsage)})
	}
	if r.PerTarget != nil {
		rows = append(rows, [2]string{"per target", counts(r.PerTarget)}, [2]string{"failovers", fmt.Sprint(r.Failovers)})
	}
	rows = append(rows, [2]string{"errors by kind", counts(r.ErrorsByKind)}, [2]string{"per worker", counts(r.PerWorker)})
	fmt.Fprintf(tw, "loadgen %s\n", r.Mode)
	for _, row := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// counts renders a map of counts sorted by key, "-" when empty.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, key := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", key, m[key]))
	}
	return strings.Join(parts, ", ")
}
