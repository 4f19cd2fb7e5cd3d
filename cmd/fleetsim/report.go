package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
)

// columns of the table, in order: the report's required fields, then the
// workload's bound when there is one.
var columns = []string{"policy", "replicas", "sync", "workers", "requests", "hit_rate", "ttft_p50_ms",
	"ttft_p99_ms", "throughput_rps", "load_cv", "prefill_tokens", "gossip_bytes_per_sec",
	"router_hit_rate", "oracle_hit_rate", "lost_never_arrived", "lost_evicted", "lost_below_threshold",
	"lost_shed", "lost_ineligible", "false_hits", "judged_false_hits", "judged_false_from_peer",
	"judged_lost_shed", "judged_lost_ineligible", "judged_lost_below_threshold", "judged_lost_peer_fact_late",
	"judged_cold_misses"}

// writeTable prints rows as an aligned table. It leaves out wall time so that
// the same flags always print the same table.
func writeTable(w io.Writer, rows []row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := columns
	if len(rows) > 0 && rows[0].PD != "" {
		header = append(header[:len(header):len(header)], "pd", "decode_load_cv", "prefill_queue_mean", "prefill_queue_max")
	}
	if len(rows) > 0 && rows[0].Rollouts > 0 {
		header = append(header[:len(header):len(header)], "rollouts", "prompt_tokens_per_rollout", "rollouts_per_min")
	}
	if len(rows) > 0 && rows[0].InfiniteCacheHitRate != nil {
		header = append(header[:len(header):len(header)], "infinite_cache_hit_rate")
	}
	door := slices.ContainsFunc(rows, func(r row) bool { return r.SlowestAfterDoorMs > 0 })
	if door {
		header = append(header[:len(header):len(header)], "door_wait_p99_ms", "slowest_at_door_ms", "slowest_after_door_ms")
	}
	kills := slices.ContainsFunc(rows, func(r row) bool { return r.Killed > 0 })
	if kills {
		header = append(header[:len(header):len(header)], "cuts", "retried", "resumed", "cut_failed", "resume_pause_p99_ms")
	}
	for _, h := range header {
		fmt.Fprint(tw, h, "\t")
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%.4f\t%.1f\t%.1f\t%.3f\t%.4f\t%d\t%.0f\t",
			r.Policy, r.Replicas, r.Sync, r.Workers, r.Requests, r.HitRate, r.TTFTP50Ms, r.TTFTP99Ms,
			r.ThroughputRPS, r.LoadCV, r.PrefillTokens, r.GossipBytesPerSec)
		l := r.Lost
		fmt.Fprintf(tw, "%.4f\t%.4f\t%d\t%d\t%d\t%d\t%d\t%d\t", r.RouterHitRate, r.OracleHitRate,
			l.NeverArrived, l.Evicted, l.BelowThreshold, l.Shed, l.Ineligible, r.FalseHits)
		j := r.Judged
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t", j.FalseHits, j.FalseFromPeer, j.Shed, j.Ineligible,
			j.BelowThreshold, j.PeerFactLate, j.ColdMisses)
		if r.PD != "" {
			fmt.Fprintf(tw, "%s\t%.4f\t%.1f\t%d\t", r.PD, r.DecodeLoadCV, r.PrefillQueueMean, r.PrefillQueueMax)
		}
		if rows[0].Rollouts > 0 {
			fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t", r.Rollouts, r.PromptTokensPerRollout, r.RolloutsPerMin)
		}
		if r.InfiniteCacheHitRate != nil {
			fmt.Fprintf(tw, "%.4f\t", *r.InfiniteCacheHitRate)
		}
		if door {
			fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t", r.DoorWaitP99Ms, r.SlowestAtDoorMs, r.SlowestAfterDoorMs)
		}
		if kills {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.0f\t", r.Cuts, r.Retried, r.Resumed, r.CutFailed, r.ResumePauseP99Ms)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// writeJSON writes {"runs":[...]} to path.
func writeJSON(path string, rows []row) error {
	body, err := json.MarshalIndent(struct {
		Runs []row `json:"runs"`
	}{rows}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(body, '\n'), 0o644)
}
