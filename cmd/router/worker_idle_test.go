package main

import (
	"strings"
	"testing"
	"time"
)

// TestWorkerIdleTimeoutIsASettingBelowTheWorkersKeepAlive: the pooled
// connections' idle timeout defaults to 4s, under uvicorn's 5s keep-alive
// (vLLM, SGLang), takes a duration, and refuses one that is not positive,
// naming the flag.
func TestWorkerIdleTimeoutIsASettingBelowTheWorkersKeepAlive(t *testing.T) {
	cfg, err := parseServe(t)
	if err != nil || cfg.Proxy.WorkerIdleTimeout != 4*time.Second {
		t.Fatalf("default: %v, %v; want 4s", cfg.Proxy.WorkerIdleTimeout, err)
	}
	if cfg, err = parseServe(t, "--worker-idle-timeout", "1500ms"); err != nil || cfg.Proxy.WorkerIdleTimeout != 1500*time.Millisecond {
		t.Fatalf("--worker-idle-timeout 1500ms: %v, %v", cfg.Proxy.WorkerIdleTimeout, err)
	}
	for _, bad := range []string{"0s", "-1s", "soon"} {
		if _, err := parseServe(t, "--worker-idle-timeout", bad); err == nil || !strings.Contains(err.Error(), "--worker-idle-timeout") {
			t.Fatalf("--worker-idle-timeout %s: %v; want a refusal naming the flag", bad, err)
		}
	}
}
