package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/clock"
)

// runApp runs the command line with the wall clock and no progress ticks.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := newApp(environment{stdout: &stdout, stderr: &stderr, clock: clock.RealClock{}, ticks: noTicks})
	err := app.RunContext(context.Background(), append([]string{"loadgen"}, args...))
	return stdout.String(), err
}

func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const traceLine = `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}`

func TestReplayCommandWritesTheReport(t *testing.T) {
	server := newFakeServer(t, 2)
	trace := writeTrace(t, traceLine, traceLine, strings.Replace(traceLine, `"timestamp": 0`, `"timestamp": 20`, 1))
	out := filepath.Join(t.TempDir(), "report.json")
	table, err := runApp(t, "replay", "--trace", trace, "--target", server.url, "--rate-scale", "2", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "loadgen replay") || !strings.Contains(table, "3 (succeeded 3") {
		t.Fatalf("table:\n%s", table)
	}
	var rep report
	data, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(data, &rep)
	}
	if err != nil || rep.Requests != 3 || rep.PerWorker["w0"]+rep.PerWorker["w1"] != 3 || rep.CachedTokenRatio <= 0 {
		t.Fatalf("JSON report %+v, %v", rep, err)
	}
}

func TestAgenticCommandRuns(t *testing.T) {
	server := newFakeServer(t, 2)
	table, err := runApp(t, "agentic", "--target", server.url, "--sessions", "2", "--turns", "2",
		"--system-prompt-tokens", "16", "--task-tokens", "8", "--observation-tokens", "8", "--answer-tokens", "2",
		"--think-time", "0s", "--model", "m")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "4 (succeeded 4") || len(server.requests()) != 4 || server.requests()[0].model != "m" {
		t.Fatalf("%d requests; table:\n%s", len(server.requests()), table)
	}
}

func TestBadFlagsAreRefusedAtStartNamingTheFlag(t *testing.T) {
	trace := writeTrace(t, traceLine)
	badTrace := writeTrace(t, traceLine, `{"timestamp": 0}`)
	target := "http://127.0.0.1:1"
	replay := func(args ...string) []string {
		return append([]string{"replay", "--trace", trace, "--target", target}, args...)
	}
	agentic := func(args ...string) []string { return append([]string{"agentic", "--target", target}, args...) }
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{replay("--rate-scale", "0"), "--rate-scale"},
		{replay("--rate-scale", "-2"), "--rate-scale"},
		{replay("--rate-scale", "NaN"), "--rate-scale"},
		{replay("--arrival-spread", "-1s"), "--arrival-spread"},
		{replay("--limit", "-1"), "--limit"},
		{replay("--concurrency-limit", "-1"), "--concurrency-limit"},
		{replay("--max-output-tokens", "-5"), "--max-output-tokens"},
		{replay("--duration", "0s"), "--duration"},
		{replay("--request-timeout", "-1s"), "--request-timeout"},
		{replay("--json", "/no/such/dir/out.json"), "--json"},
		{replay("--requests-json", "/no/such/dir/requests.jsonl"), "--requests-json"},
		{[]string{"replay", "--trace", trace, "--target", "localhost:8000"}, "--target"},
		{[]string{"replay", "--trace", filepath.Join(t.TempDir(), "absent"), "--target", target}, "--trace"},
		{[]string{"replay", "--trace", badTrace, "--target", target}, "trace line 2"},
		{agentic("--endpoint", "responses"), "--endpoint"},
		{agentic("--tools", "-1"), "--tools"},
		{agentic("--tools", "5000"), "--tools"},
		{agentic("--target", "ftp://127.0.0.1:2"), "--target"},
		{agentic("--sessions", "0"), "--sessions"},
		{agentic("--turns", "-3"), "--turns"},
		{agentic("--observation-tokens", "0"), "--observation-tokens"},
		{agentic("--think-time", "-1s"), "--think-time"},
		{agentic("--turns", "100000", "--observation-tokens", "100000"), "--turns"},
	} {
		_, err := runApp(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: err %v, want one naming %s", tc.args, err, tc.flag)
			continue
		}
		if !errors.Is(err, errBadFlag) {
			t.Errorf("%v: err %v does not wrap errBadFlag", tc.args, err)
		}
	}
}

func TestMissingRequiredFlagsAreRefused(t *testing.T) {
	if _, err := runApp(t, "replay", "--target", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "trace") {
		t.Fatalf("err %v, want one naming the missing --trace", err)
	}
	if _, err := runApp(t, "agentic"); err == nil || !strings.Contains(err.Error(), "target") {
		t.Fatalf("err %v, want one naming the missing --target", err)
	}
}
