package fleet

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// smallSessions is an agentic workload that runs in milliseconds: 24
// sessions of 8 turns whose prompts grow from 1k to about 5k tokens.
func smallSessions() workload.AgenticConfig {
	return workload.AgenticConfig{
		Sessions: 24, Turns: 8, SystemPromptTokens: 512, TaskTokens: 512,
		ObservationTokens: 512, AnswerTokens: 32, ThinkTime: 200 * time.Millisecond, Seed: 3,
	}
}

// balancedThresholds let the cache-aware policy shed load at a few requests
// of imbalance: with the reference defaults (64 requests) a fleet this small
// never counts as imbalanced and every session sharing the system prompt
// stays on one worker.
func balancedThresholds() affinity.Thresholds {
	return affinity.Thresholds{CacheThreshold: 0.3, BalanceAbs: 4, BalanceRel: 1.5}
}

// smallFleet is six workers with room in their caches for every session.
func smallFleet(policy string, replicas int, sync Sync) Config {
	return Config{
		Workers: 6, Replicas: replicas, Sync: sync, Policy: policy, Seed: 1,
		Thresholds: balancedThresholds(), Engine: sim.Config{KVCapacityTokens: 1 << 18},
	}
}

// run simulates cfg over the agentic workload and fails the test on error.
func run(t *testing.T, cfg Config, sessions workload.AgenticConfig) Result {
	t.Helper()
	res, err := Run(cfg, NewAgentic(sessions))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := sessions.Sessions * sessions.Turns
	if res.Requests+res.Errors != want {
		t.Fatalf("%d requests completed and %d failed, want %d in all", res.Requests, res.Errors, want)
	}
	return res
}
