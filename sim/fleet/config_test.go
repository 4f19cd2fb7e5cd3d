package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
)

func TestInvalidConfigsNameTheirField(t *testing.T) {
	for field, cfg := range map[string]Config{
		"Workers":              {},
		"Decode":               {Prefill: 2},
		"Replicas":             {Workers: 1, Replicas: -1},
		"Sync":                 {Workers: 1, Sync: "carrier pigeon"},
		"GossipLoss":           {Workers: 1, GossipLoss: 1},
		"Thresholds":           {Workers: 1, Thresholds: affinity.Thresholds{BalanceAbs: -1}},
		"Policy":               {Workers: 1, Policy: "fastest"},
		"DecodePolicy":         {Prefill: 1, Decode: 1, DecodePolicy: "fastest"},
		"Slowdown":             {Workers: 2, Slowdown: map[affinity.WorkerID]float64{3: 2}},
		"GossipInterval":       {Workers: 1, GossipInterval: -1},
		"EngineScrapeInterval": {Workers: 1, Door: true, EngineScrapeInterval: -1},
		"DoorQueueTimeout":     {Workers: 1, Door: true, DoorQueueTimeout: -1},
		"Kills":                {Workers: 2, Kills: []Kill{{Worker: 3}}},
	} {
		err := cfg.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want ErrBadConfig naming it", field, err)
		}
		if _, err := Run(cfg, NewTrace(nil, 1)); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Run accepted it: %v", field, err)
		}
	}
}

func TestPolicyLabelsRoundTrip(t *testing.T) {
	for _, label := range []string{"cache_aware", "cache_aware:least_load", "cache_aware:rendezvous", "cache_aware_fleet_gate:rendezvous", "round_robin"} {
		policy, placement, err := ParsePolicy(label)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		if got := (Config{Policy: policy, MissPlacement: placement}).PolicyLabel(); got != label {
			t.Errorf("%s came back as %s", label, got)
		}
	}
	if got := (Config{Policy: "cache_aware", MissPlacement: "least_prefill"}).PolicyLabel(); got != "cache_aware" {
		t.Errorf("the default placement is spelled out: %s", got)
	}
	if _, _, err := ParsePolicy("round_robin:rendezvous"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("a placement for round_robin: error %v, want ErrBadConfig", err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"cache_aware", "cache_aware:rendezvous", ":", "round_robin:x", "cache_aware::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, label string) {
		policy, placement, err := ParsePolicy(label)
		if err != nil {
			return
		}
		cfg := Config{Workers: 1, Policy: policy, MissPlacement: placement}
		if cfg.Validate() != nil {
			return
		}
		again, _, err := ParsePolicy(cfg.PolicyLabel())
		if err != nil || again != cfg.withDefaults().Policy {
			t.Errorf("%q: label %q parses back to %q, %v", label, cfg.PolicyLabel(), again, err)
		}
	})
}
