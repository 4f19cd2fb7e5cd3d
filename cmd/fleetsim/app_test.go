package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// small is an agentic run that takes milliseconds.
var small = []string{"fleetsim", "--agentic", "--sessions", "8", "--turns", "4", "--system-prompt-tokens", "256",
	"--task-tokens", "128", "--observation-tokens", "128", "--answer-tokens", "16", "--think-time", "100ms", "--workers", "4"}

// runApp runs the command line and returns stdout and the error.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(args)
	return stdout.String(), err
}

func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// readRuns reads the --json file as generic rows.
func readRuns(t *testing.T, path string) []map[string]any {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc.Runs
}

func TestSameFlagsPrintTheSameReport(t *testing.T) {
	dir := t.TempDir()
	args := with(small, "--replicas", "1,3", "--policies", "cache_aware,power_of_two", "--sync", "gossip,none", "--gossip-loss", "0.1")
	first, err := runApp(t, with(args, "--json", filepath.Join(dir, "a.json"))...)
	if err != nil {
		t.Fatal(err)
	}
	second, err := runApp(t, with(args, "--json", filepath.Join(dir, "b.json"), "--parallel", "2")...)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("two runs printed different tables:\n%s\n%s", first, second)
	}
	a, b := readRuns(t, filepath.Join(dir, "a.json")), readRuns(t, filepath.Join(dir, "b.json"))
	for i := range a {
		delete(a[i], "wall_seconds")
		delete(b[i], "wall_seconds")
	}
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	if !bytes.Equal(aj, bj) {
		t.Errorf("two runs wrote different JSON:\n%s\n%s", aj, bj)
	}
}

func TestEveryCombinationIsOneRunInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	out, err := runApp(t, with(small, "--replicas", "1,2", "--policies", "round_robin,cache_aware:rendezvous",
		"--sync", "none,shared", "--json", path)...)
	if err != nil {
		t.Fatal(err)
	}
	runs := readRuns(t, path)
	var got []string
	for _, r := range runs {
		got = append(got, r["policy"].(string)+"/"+r["sync"].(string)+"/"+jsonInt(r["replicas"]))
	}
	want := []string{
		"round_robin/none/1", "round_robin/none/2", "round_robin/shared/1", "round_robin/shared/2",
		"cache_aware:rendezvous/none/1", "cache_aware:rendezvous/none/2",
		"cache_aware:rendezvous/shared/1", "cache_aware:rendezvous/shared/2",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("runs %v, want %v", got, want)
	}
	if lines := strings.Count(out, "\n"); lines != len(want)+1 {
		t.Errorf("table of %d lines, want a header and %d rows:\n%s", lines, len(want), out)
	}
}

func jsonInt(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReportCarriesTheRequiredFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	if _, err := runApp(t, with(small, "--json", path)...); err != nil {
		t.Fatal(err)
	}
	run := readRuns(t, path)[0]
	for _, key := range []string{"policy", "replicas", "sync", "workers", "requests", "hit_rate", "ttft_p50_ms",
		"ttft_p99_ms", "throughput_rps", "load_cv", "prefill_tokens", "gossip_bytes_per_sec", "wall_seconds"} {
		if _, ok := run[key]; !ok {
			t.Errorf("JSON run lacks %q: %v", key, run)
		}
	}
	if run["requests"].(float64) != 32 {
		t.Errorf("requests %v, want 8 sessions x 4 turns", run["requests"])
	}
}

func TestTraceRunReportsTheInfiniteCacheBound(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	lines := `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 900, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 20, "input_length": 600, "output_length": 3, "hash_ids": [3, 4]}
`
	if err := os.WriteFile(trace, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.json")
	out, err := runApp(t, "fleetsim", "--trace", trace, "--limit", "2", "--workers", "2", "--json", path)
	if err != nil {
		t.Fatal(err)
	}
	run := readRuns(t, path)[0]
	if run["requests"].(float64) != 2 {
		t.Errorf("--limit 2 replayed %v requests", run["requests"])
	}
	if bound, ok := run["infinite_cache_hit_rate"].(float64); !ok || bound <= 0 {
		t.Errorf("infinite_cache_hit_rate %v, want the trace's bound", run["infinite_cache_hit_rate"])
	}
	if !strings.Contains(out, "infinite_cache_hit_rate") {
		t.Errorf("table lacks the bound:\n%s", out)
	}
}

func TestSplitFleetReportsItsShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	args := with(small[:len(small)-2], "--pd", "2:3", "--policies", "cache_aware_fleet_gate,cache_aware", "--json", path)
	if _, err := runApp(t, args...); err != nil {
		t.Fatal(err)
	}
	for _, run := range readRuns(t, path) {
		if run["pd"] != "2:3" || run["workers"].(float64) != 5 || run["prefill_tokens"].(float64) == 0 {
			t.Errorf("split run %v: want pd 2:3, 5 workers and prefill tokens", run)
		}
	}
}

// TestKilledWorkersStreamsResumeOrFail: --kill cuts the streams of the
// workers it kills mid-run (all but one, whichever held the sessions): they
// resume on the last one with every token, or with --migration-limit 0 fail,
// and the table says so.
func TestKilledWorkersStreamsResumeOrFail(t *testing.T) {
	args := with(small, "--answer-tokens", "256", "--kill", "1:500ms", "--kill", "2:500ms", "--kill", "3:500ms")
	for _, limit := range []string{"2", "0"} {
		path := filepath.Join(t.TempDir(), "out.json")
		out, err := runApp(t, with(args, "--migration-limit", limit, "--json", path)...)
		if err != nil {
			t.Fatal(err)
		}
		run := readRuns(t, path)[0]
		cuts, resumed, failed := run["cuts"], run["resumed"], run["cut_failed"]
		switch {
		case cuts == nil || !strings.Contains(out, "resume_pause_p99_ms"):
			t.Errorf("--migration-limit %s: no cut reported: %v\n%s", limit, run, out)
		case limit == "2" && (resumed == nil || failed != nil || run["output_tokens"].(float64) != 32*256):
			t.Errorf("--migration-limit 2: %v resumed, %v failed, %v tokens: want cut streams resumed with all 8192 tokens",
				resumed, failed, run["output_tokens"])
		case limit == "0" && (resumed != nil || failed == nil):
			t.Errorf("--migration-limit 0: %v resumed, %v failed: want cut streams failed", resumed, failed)
		}
	}
}

func TestBadFlagsAreRefusedNamingTheFlag(t *testing.T) {
	for flag, args := range map[string][]string{
		"trace":                       {"fleetsim"},
		"agentic":                     {"fleetsim", "--agentic", "--trace", "x.jsonl"},
		"workers":                     with(small, "--workers", "0"),
		"replicas":                    with(small, "--replicas", "0"),
		"policies":                    with(small, "--policies", "fastest"),
		"sync":                        with(small, "--sync", "psychic"),
		"pd":                          with(small[:len(small)-2], "--pd", "4"),
		"slowdown":                    with(small, "--slowdown", "9:2"),
		"kill":                        with(small, "--kill", "9:1s"),
		"migration-limit":             with(small, "--migration-limit", "-1"),
		"gossip-loss":                 with(small, "--gossip-loss", "1"),
		"placer-answer-loss":          with(small, "--placer-answer-loss", "1"),
		"gossip-interval":             with(small, "--gossip-interval", "0s"),
		"gossip-flush-interval":       with(small, "--gossip-flush-interval", "0s"),
		"limit":                       with(small, "--limit", "3"),
		"rate-scale":                  with(small, "--rate-scale", "2"),
		"arrival-spread":              with(small, "--arrival-spread", "3s"),
		"block-size":                  with(small, "--block-size", "0"),
		"cache-threshold":             with(small, "--cache-threshold", "-1"),
		"decode-policy":               with(small, "--decode-policy", "fastest"),
		"groups":                      with(small, "--groups", "9"),
		"observation-spread":          with(small, "--observation-spread", "-1"),
		"json":                        with(small, "--json", "/nonexistent/dir/out.json"),
		"parallel":                    with(small, "--parallel", "0"),
		"balance":                     with(small, "--balance", "sticky"),
		"kv-capacity-tokens":          with(small, "--kv-capacity-tokens", "-5"),
		"engine-scrape-interval-secs": with(small, "--engine-scrape-interval-secs", "0"),
	} {
		_, err := runApp(t, args...)
		if !errors.Is(err, errBadFlag) || !strings.Contains(err.Error(), "--"+flag) {
			t.Errorf("%v: error %v, want one naming --%s", args[1:], err, flag)
		}
	}
	if _, err := runApp(t, with(small[:len(small)-2], "--pd", "1:1", "--workers", "3")...); err == nil ||
		!strings.Contains(err.Error(), "--workers") {
		t.Errorf("--workers with --pd: error %v, want one naming --workers", err)
	}
	if _, err := runApp(t, "fleetsim", "--trace", "x.jsonl", "--sessions", "3"); err == nil ||
		!strings.Contains(err.Error(), "--sessions") {
		t.Errorf("--sessions with --trace: error %v, want one naming --sessions", err)
	}
}

func FuzzParsePD(f *testing.F) {
	for _, s := range []string{"4:6", "0:1", ":", "1:", "-1:2", "9999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, d, err := parsePD(s)
		if err != nil {
			if !errors.Is(err, errBadFlag) {
				t.Errorf("%q: error %v does not wrap errBadFlag", s, err)
			}
			return
		}
		if p <= 0 || d <= 0 {
			t.Errorf("%q accepted as %d:%d", s, p, d)
		}
	})
}

func TestSplitFleetReportsTheSeedsFigures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	out, err := runApp(t, with(small[:len(small)-2], "--pd", "2:3", "--json", path)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"prefill_queue_mean", "prefill_queue_max", "rollouts", "prompt_tokens_per_rollout", "rollouts_per_min"} {
		if !strings.Contains(out, col) {
			t.Errorf("table lacks %s:\n%s", col, out)
		}
	}
	run := readRuns(t, path)[0]
	if run["rollouts"].(float64) != 8 || run["prompt_tokens_per_rollout"].(float64) <= 0 || run["rollouts_per_min"].(float64) <= 0 {
		t.Errorf("8 sessions: rollouts %v, prompt tokens per rollout %v, rollouts/min %v: want 8 and both positive",
			run["rollouts"], run["prompt_tokens_per_rollout"], run["rollouts_per_min"])
	}
}
