package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
)

// vllmRouterFlag is one line of testdata/vllm-router-flags.txt.
type vllmRouterFlag struct {
	name, def string
	ours      string // the default set otherwise here on purpose; "" for none
}

func readVLLMRouterFlags(t *testing.T) []vllmRouterFlag {
	t.Helper()
	f, err := os.Open("testdata/vllm-router-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []vllmRouterFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		fl := vllmRouterFlag{name: fields[0], def: fields[1]}
		if len(fields) > 2 {
			fl.ours = strings.TrimPrefix(fields[2], "ours=")
		}
		out = append(out, fl)
	}
	if len(out) < 60 {
		t.Fatalf("only %d flags read", len(out))
	}
	return out
}

// defaultOf is a flag's default as the reference writes it.
func defaultOf(f cli.Flag) string {
	switch f := f.(type) {
	case *cli.StringFlag:
		if f.Value == "" {
			return "-"
		}
		return f.Value
	case *cli.IntFlag:
		return strconv.Itoa(f.Value)
	case *cli.Int64Flag:
		return strconv.FormatInt(f.Value, 10)
	case *cli.Float64Flag:
		return strconv.FormatFloat(f.Value, 'f', -1, 64)
	case *cli.BoolFlag:
		return strconv.FormatBool(f.Value)
	case *cli.StringSliceFlag:
		return "-"
	}
	return fmt.Sprintf("%T", f)
}

func serveFlagNamed(name string) cli.Flag {
	for _, f := range serveFlags() {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func TestEveryVLLMRouterFlagIsAcceptedWithItsDefault(t *testing.T) {
	for _, ref := range readVLLMRouterFlags(t) {
		f := serveFlagNamed(ref.name)
		if f == nil {
			t.Errorf("--%s: not accepted", ref.name)
			continue
		}
		want := ref.def
		if ref.ours != "" {
			want = ref.ours
		}
		if got := defaultOf(f); got != want && !(want == "1.0" && got == "1") {
			t.Errorf("--%s: default %s, want %s", ref.name, got, want)
		}
	}
}

// sampleValues give each vllm-router flag a value it may take, with the
// companions it needs.
var sampleValues = map[string][]string{
	"prefill":                        {"--vllm-pd-disaggregation", "--prefill", "http://127.0.0.1:9", "9000", "--decode", "http://127.0.0.1:10"},
	"decode":                         {"--vllm-pd-disaggregation", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:10"},
	"vllm-pd-disaggregation":         {"--vllm-pd-disaggregation"},
	"prefill-policy":                 {"--prefill-policy", "power_of_two"},
	"decode-policy":                  {"--decode-policy", "round_robin"},
	"policy":                         {"--policy", "rendezvous_hash"},
	"log-level":                      {"--log-level", "warning"},
	"host":                           {"--host", "0.0.0.0"},
	"worker-urls":                    {"--worker-urls", "http://127.0.0.1:9"},
	"cors-allowed-origins":           {"--cors-allowed-origins", "https://example.com"},
	"health-check-endpoint":          {"--health-check-endpoint", "/healthz"},
	"kv-connector":                   {"--kv-connector", "mooncake"},
	"backend":                        {"--backend", "vllm"},
	"runtime":                        {"--runtime", "vllm"},
	"history-backend":                {"--history-backend", "none"},
	"selector":                       {"--selector", "app=vllm"},
	"prefill-selector":               {"--prefill-selector", "role=prefill"},
	"decode-selector":                {"--decode-selector", "role=decode"},
	"api-key":                        {"--api-key", "sk-worker"},
	"request-id-headers":             {"--request-id-headers", "x-my-id"},
	"otlp-traces-endpoint":           {"--otlp-traces-endpoint", "127.0.0.1:4317"},
	"service-discovery-namespace":    {"--service-discovery-namespace", "llm"},
	"vllm-discovery-address":         {"--vllm-discovery-address", "127.0.0.1:30001"},
	"program-scheduling-config-json": {"--program-scheduling-config-json", "{}"},
	"wasm-middleware":                {"--wasm-middleware", "m.wasm"},
	"wasm-middleware-sha256":         {"--wasm-middleware-sha256", "00"},
	"wasm-middleware-route":          {"--wasm-middleware-route", "/v1/chat/completions"},
	"otel-excluded-paths":            {"--otel-excluded-paths", "/health"},
	"api-key-validation-urls":        {"--api-key-validation-urls", "http://127.0.0.1:9/validate"},
	"prometheus-host":                {"--prometheus-host", "127.0.0.1"},
	"rate-limit-tokens-per-second":   {"--rate-limit-tokens-per-second", "100"},
}

// sampleArgs is a command line that sets ref to a value it takes. A flag
// that writes files is pointed into the test's own directory, never the tree.
func sampleArgs(t *testing.T, ref vllmRouterFlag) []string {
	if ref.name == "log-dir" {
		return []string{"--log-dir", t.TempDir()}
	}
	if args, ok := sampleValues[ref.name]; ok {
		return args
	}
	switch ref.def {
	case "false":
		return []string{"--" + ref.name}
	case "-":
		return []string{"--" + ref.name, "x"}
	}
	return []string{"--" + ref.name, ref.def}
}

func TestEveryVLLMRouterFlagWithAValueIsTaken(t *testing.T) {
	for _, ref := range readVLLMRouterFlags(t) {
		if ref.name == "version" {
			continue
		}
		args := sampleArgs(t, ref)
		if _, err := parseServe(t, normalizeArgs(args)...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestAVLLMRouterCommandLineComesUpReady starts a replica from a command
// line as vllm-router would take it (its flags beyond the defaults) and
// routes a completion through it.
func TestAVLLMRouterCommandLineComesUpReady(t *testing.T) {
	w := fakeworker.Start(t, "w1")
	args := []string{"--port", "0", "--prometheus-port", "0", "--raft-bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
		"--worker-urls", w.URL, "--policy", "cache_aware", "--cache-threshold", "0.5", "--balance-abs-threshold", "32",
		"--balance-rel-threshold", "1.2", "--eviction-interval-secs", "60", "--max-tree-size", "1000000",
		"--max-concurrent-requests", "1024", "--queue-size", "10", "--queue-timeout-secs", "5",
		"--rate-limit-tokens-per-second", "512", "--retry-backoff-multiplier", "2", "--retry-jitter-factor", "0.1",
		"--disable-circuit-breaker", "--cb-window-duration-secs", "30", "--worker-startup-timeout-secs", "60",
		"--worker-startup-check-interval", "5", "--intra-node-data-parallel-size", "1", "--kv-connector", "nixl",
		"--log-level", "warning", "--log-dir", t.TempDir(), "--cors-allowed-origins", "https://app.example",
		"--health-check-interval-secs", "1", "--request-id-headers", "x-req", "--enable-trace", "--selector", "app=vllm"}
	cfg, err := parseServe(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	resp, err := http.Post("http://"+r.HTTPAddr()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-worker-id") != "w1" {
		t.Fatalf("status %d from %q", resp.StatusCode, resp.Header.Get("x-worker-id"))
	}
}
