package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
)

func baseConfig() RoutingConfig {
	return RoutingConfig{BlockSize: 256, Policy: "cache_aware", MissPlacement: "least_load",
		CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5}
}

func TestDiffNamesTheFirstDifferingField(t *testing.T) {
	changes := map[string]func(*RoutingConfig){
		"block_size":            func(c *RoutingConfig) { c.BlockSize = 512 },
		"policy":                func(c *RoutingConfig) { c.Policy = "round_robin" },
		"miss_placement":        func(c *RoutingConfig) { c.MissPlacement = "rendezvous" },
		"cache_threshold":       func(c *RoutingConfig) { c.CacheThreshold = 0.5 },
		"balance_abs_threshold": func(c *RoutingConfig) { c.BalanceAbsThreshold = 32 },
		"balance_rel_threshold": func(c *RoutingConfig) { c.BalanceRelThreshold = 2 },
		"hot_prefix_load":       func(c *RoutingConfig) { c.HotPrefixLoad = 8 },
		"hot_prefix_owners":     func(c *RoutingConfig) { c.HotPrefixOwners = 3 },
	}
	for field, change := range changes {
		other := baseConfig()
		change(&other)
		err := baseConfig().Diff(other)
		var mismatch *ConfigMismatchError
		if !errors.As(err, &mismatch) || !errors.Is(err, ErrConfigMismatch) || mismatch.Field != field {
			t.Errorf("changing %s: Diff = %v", field, err)
		}
		if baseConfig().Fingerprint() == other.Fingerprint() {
			t.Errorf("changing %s keeps the fingerprint", field)
		}
	}
	if err := baseConfig().Diff(baseConfig()); err != nil {
		t.Fatalf("equal configs differ: %v", err)
	}
}

func TestFingerprintIsStableAndFixedWidth(t *testing.T) {
	a, b := baseConfig().Fingerprint(), baseConfig().Fingerprint()
	if a != b || len(a) != 16 {
		t.Fatalf("fingerprints %q and %q, want equal and 16 hex digits", a, b)
	}
	if (RoutingConfig{}).Fingerprint() == a {
		t.Fatal("zero config has the same fingerprint as a configured one")
	}
}

func TestValidateRefusesHotPrefixSettingsOutOfRange(t *testing.T) {
	for field, change := range map[string]func(*RoutingConfig){
		"hot_prefix_load":   func(c *RoutingConfig) { c.HotPrefixLoad = -1 },
		"hot_prefix_owners": func(c *RoutingConfig) { c.HotPrefixOwners = affinity.MaxHotOwners + 1 },
	} {
		c := baseConfig()
		change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s out of range: Validate = %v, want an error naming it", field, err)
		}
	}
	c := baseConfig()
	c.HotPrefixLoad, c.HotPrefixOwners = 8, 3
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// The stored config is held to the bounds the flags are held to
// (cluster.Routing.Validate calls the same checks): a block of 8 bytes or a
// relative threshold below 1 is refused, for the roles as well.
func TestValidateHoldsTheFieldsToTheFlagsBounds(t *testing.T) {
	for field, change := range map[string]func(*RoutingConfig){
		"config.block_size":                    func(c *RoutingConfig) { c.BlockSize = 8 },
		"config.balance_rel_threshold":         func(c *RoutingConfig) { c.BalanceRelThreshold = 0.5 },
		"config.prefill.balance_rel_threshold": func(c *RoutingConfig) { c.Prefill = &RoleRouting{BalanceRelThreshold: 0.5} },
	} {
		c := baseConfig()
		change(&c)
		var fe *FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s out of the flags' bounds: Validate = %v, want a refusal naming it", field, err)
		}
	}
	c := baseConfig()
	c.BlockSize, c.BalanceRelThreshold = MinBlockSize, affinity.MinBalanceRel
	if err := c.Validate(); err != nil {
		t.Fatalf("the least block and relative threshold the flags take: %v", err)
	}
}
