package cluster

import (
	"testing"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
)

// DefaultConfig is what `router serve` runs with when no flag is given: it
// must pass Validate as it is (once the node name and data dir, which have
// no default, are set), and its timings must be the ones a zero field means.
func TestDefaultConfigIsValidAndMatchesTheZeroFieldsDefaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.DataDir = "n1", t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig does not validate: %v", err)
	}
	if got, want := cfg.RaftTimings, raftnode.DefaultTimings(); got != want {
		t.Errorf("RaftTimings %+v, want raftnode's defaults %+v", got, want)
	}
	zero := Config{}.withDefaults()
	if cfg.ReapTimeout != zero.ReapTimeout || cfg.ReconcileInterval != zero.ReconcileInterval || cfg.JoinTimeout != zero.JoinTimeout {
		t.Errorf("reap %v, reconcile %v, join %v; want what zero fields mean: %v, %v, %v", cfg.ReapTimeout,
			cfg.ReconcileInterval, cfg.JoinTimeout, zero.ReapTimeout, zero.ReconcileInterval, zero.JoinTimeout)
	}
}
