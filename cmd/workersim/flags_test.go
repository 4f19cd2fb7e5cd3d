package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/internal/logsink"
)

// parseArgs runs the command line and returns the configuration it would serve.
func parseArgs(t *testing.T, args ...string) (serverConfig, error) {
	t.Helper()
	var got serverConfig
	var out bytes.Buffer
	app := newApp(&out, &out, func(_ *cli.Context, cfg serverConfig) error {
		got = cfg
		return nil
	})
	err := app.Run(append([]string{"workersim"}, args...))
	return got, err
}

func TestFlagDefaults(t *testing.T) {
	cfg, err := parseArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.host != "127.0.0.1" || cfg.port != 8000 || cfg.timeScale != 1 || cfg.role != roleBoth ||
		len(cfg.models) != 1 || cfg.models[0] != "sim-model" || cfg.engine.KVCapacityTokens != 262144 ||
		cfg.engine.MaxNumSeqs != 256 || cfg.engine.MaxBatchedTokens != 8192 || cfg.fault.Mode != faultNone ||
		cfg.embeddingDims != 64 || cfg.maxStoredResponses != 1024 || cfg.healthGenerateTimeout != 20*time.Second {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("WORKERSIM_TIME_SCALE", "50")
	t.Setenv("WORKERSIM_ROLE", "decode")
	cfg, err := parseArgs(t, "--port", "0", "--model", "a", "--model", "b", "--worker-id", "w1",
		"--fault", `{"mode":"degrade","factor":3}`, "--kv-capacity-tokens", "4096")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.port != 0 || cfg.timeScale != 50 || cfg.role != roleDecode || strings.Join(cfg.models, ",") != "a,b" ||
		cfg.workerID != "w1" || cfg.fault != (fault{Mode: faultDegrade, Factor: 3}) || cfg.engine.KVCapacityTokens != 4096 {
		t.Fatalf("config = %+v", cfg)
	}
}

func TestBadFlagsAreRefusedByName(t *testing.T) {
	cases := map[string][]string{
		"time-scale":              {"--time-scale", "0"},
		"role":                    {"--role", "router"},
		"port":                    {"--port", "70000"},
		"kv-capacity-tokens":      {"--kv-capacity-tokens", "8"},
		"max-num-seqs":            {"--max-num-seqs", "0"},
		"max-num-batched-tokens":  {"--max-num-batched-tokens", "-1"},
		"fault":                   {"--fault", "melt"},
		"model":                   {"--model", ""},
		"embedding-dimensions":    {"--embedding-dimensions", "0"},
		"max-stored-responses":    {"--max-stored-responses", "0"},
		"health-generate-timeout": {"--health-generate-timeout", "0s"},
		"scheduling-policy":       {"--scheduling-policy", "lifo"},
	}
	for flag, args := range cases {
		if _, err := parseArgs(t, args...); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v: err = %v, want one naming --%s", args, err, flag)
		}
	}
}

// TestRunPrintsTheBoundAddressFirst starts the real entry point on port 0 and reads the address
// it announces.
func TestRunPrintsTheBoundAddressFirst(t *testing.T) {
	cfg := testConfig()
	ctx, cancel := context.WithCancel(context.Background())
	out := &logsink.Sink{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, out, func(int) {}) }()
	waitFor(t, "the listening line", func() bool { return strings.Contains(out.String(), "\n") })
	line := strings.SplitN(out.String(), "\n", 2)[0]
	addr, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		t.Fatalf("first line = %q", line)
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("announced address %s: %v", addr, err)
	}
	conn.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
