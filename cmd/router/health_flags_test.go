package main

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster/health"
)

// healthFlags parses args as `router serve` would and returns the health
// config they give, validated.
func healthFlags(t *testing.T, args ...string) (health.Config, error) {
	t.Helper()
	var cfg health.Config
	app := &cli.App{Name: "router", Flags: serveFlags(), Action: func(c *cli.Context) error {
		cfg = healthConfigFrom(c)
		return cfg.Validate()
	}}
	err := app.Run(append([]string{"router"}, args...))
	return cfg, err
}

func TestShortHealthCheckIntervalAloneIsAccepted(t *testing.T) {
	cfg, err := healthFlags(t, "--health-check-interval-secs", "1")
	if err != nil || cfg.Timeout != time.Second {
		t.Fatalf("--health-check-interval-secs 1 alone: timeout %v, %v; want accepted with a 1s timeout", cfg.Timeout, err)
	}
	if cfg, err := healthFlags(t); err != nil || cfg.Timeout != 5*time.Second || cfg.Interval != time.Minute {
		t.Fatalf("defaults: interval %v timeout %v, %v; want 60s and 5s", cfg.Interval, cfg.Timeout, err)
	}
	_, err = healthFlags(t, "--health-check-interval-secs", "1", "--health-check-timeout-secs", "5")
	if err == nil || !strings.Contains(err.Error(), "--health-check-timeout-secs") {
		t.Fatalf("an explicit timeout above the interval: err = %v, want a refusal naming --health-check-timeout-secs", err)
	}
}

func TestDegradeFlagsReachTheMonitor(t *testing.T) {
	t.Setenv("ROUTER_DEGRADE_RATIO", "0.1")
	cfg, err := healthFlags(t, "--degrade-window", "15s", "--api-key", "sk-1")
	if err != nil || cfg.DegradeWindow != 15*time.Second || cfg.DegradeRatio != 0.1 || cfg.APIKey != "sk-1" {
		t.Fatalf("degrade flags: window %v ratio %v key %q, %v", cfg.DegradeWindow, cfg.DegradeRatio, cfg.APIKey, err)
	}
	if _, err := healthFlags(t, "--degrade-ratio", "1"); err == nil || !strings.Contains(err.Error(), "--degrade-ratio") {
		t.Fatalf("--degrade-ratio 1: err = %v, want a refusal naming the flag", err)
	}
}
