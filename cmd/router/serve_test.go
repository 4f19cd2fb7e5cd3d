package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
)

// parseServe reads serve's flags as `router serve args...` would, without
// starting anything.
func parseServe(t *testing.T, args ...string) (cluster.Config, error) {
	t.Helper()
	var cfg cluster.Config
	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) error {
		var err error
		cfg, err = configFrom(c)
		return err
	}
	app := &cli.App{Name: "router", Commands: []*cli.Command{cmd}}
	base := []string{"router", "serve", "--data-dir", t.TempDir(), "--node-name", "t"}
	err := app.Run(append(base, args...))
	return cfg, err
}

func TestServeRefusesBadEdgeFlagsNamingThem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--worker-urls", "http://169.254.169.254:80"}, "--worker-urls"},
		{[]string{"--decode", "http://[fd00:ec2::254]:80", "--vllm-pd-disaggregation"}, "--decode"},
		{[]string{"--allowed-worker-hosts", "10.0.0.0/8", "--worker-urls", "http://127.0.0.1:8000"}, "--worker-urls"},
		{[]string{"--allowed-worker-hosts", "10.0.0.0/33"}, "--allowed-worker-hosts"},
		{[]string{"--write-timeout-secs", "0"}, "--write-timeout-secs"},
		{[]string{"--max-connections", "-1"}, "--max-connections"},
		{[]string{"--tls-cert-path", "/nonexistent.pem"}, "--tls-cert-path"},
		{[]string{"--api-keys", " , "}, "--api-keys"},
		{[]string{"--max-buffered-body-bytes", "1048576"}, "--max-buffered-body-bytes"},
		{[]string{"--rate-limit-tokens-per-second", "-1"}, "--rate-limit-tokens-per-second"},
		{[]string{"--max-body-share", "0"}, "--max-body-share"},
		{[]string{"--migration-limit", "-1"}, "--migration-limit"},
		{[]string{"--migration-buffer-bytes", "0"}, "--migration-buffer-bytes"},
		{[]string{"--migration-buffer-bytes", "4096", "--migration-buffer-total-bytes", "1024"}, "--migration-buffer-total-bytes"},
		{[]string{"--max-body-share", "1.5"}, "--max-body-share"},
		{[]string{"--min-body-rate", "-1"}, "--min-body-rate"},
		{[]string{"--body-rate-grace-secs", "-1"}, "--body-rate-grace-secs"},
		{[]string{"--api-key-classes", "k1=bulk"}, "--api-key-classes"},
		{[]string{"--api-key-tenants", "k1=acme"}, "--api-key-tenants"},
		{[]string{"--api-keys", "k1", "--api-key-tenants", "k1"}, "--api-key-tenants"},
		{[]string{"--api-keys", "k1", "--api-key-tenants", "k1=a b"}, "--api-key-tenants"},
		{[]string{"--api-keys", "k1", "--tenant-header", "x-tenant"}, "--tenant-header"},
		{[]string{"--priority-reserved", "interactive=1", "--preempt-by-resume"}, "--preempt-by-resume"},
		{[]string{"--priority-reserved", "interactive=1", "--lend-reserved-slots", "--preempt-by-resume", "--migration-limit", "0"},
			"--preempt-by-resume"},
	} {
		_, err := parseServe(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want a refusal naming %s", tc.args, err, tc.flag)
		}
	}
}

func TestAPIKeysComeFromAFileOrAList(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# the keys\nalpha\n\n beta \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseServe(t, "--api-keys", file)
	if err != nil || strings.Join(cfg.Proxy.APIKeys, ",") != "alpha,beta" {
		t.Fatalf("from a file: %v %v", cfg.Proxy.APIKeys, err)
	}
	cfg, err = parseServe(t, "--api-keys", "k1, k2")
	if err != nil || strings.Join(cfg.Proxy.APIKeys, ",") != "k1,k2" {
		t.Fatalf("from a list: %v %v", cfg.Proxy.APIKeys, err)
	}
}

func TestServeRefusesADebugAddressOffLoopback(t *testing.T) {
	if _, err := parseServe(t, "--debug-addr", "0.0.0.0:6060"); err == nil || !strings.Contains(err.Error(), "--debug-addr") {
		t.Fatalf("%v, want a refusal naming --debug-addr", err)
	}
	cfg, err := parseServe(t, "--debug-addr", "127.0.0.1:6060")
	if err != nil || cfg.DebugAddr != "127.0.0.1:6060" {
		t.Fatalf("%v %q", err, cfg.DebugAddr)
	}
}
