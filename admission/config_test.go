package admission

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestTheDefaultConfigIsValidAndBoundsAsVLLMRouterDoes: the defaults pass
// their own check, and the Scheduler they build takes vllm-router's bounds:
// 32768 in flight, a bucket of as many refilled as many per second, a
// queue of 100 for 60 s, tier-wide fairness.
func TestTheDefaultConfigIsValidAndBoundsAsVLLMRouterDoes(t *testing.T) {
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	s := d.Scheduler()
	if s.MaxInFlight != 32768 || s.Burst != 32768 || s.RatePerSec != 32768 || s.QueueSize != 100 ||
		s.QueueTimeout != time.Minute || !s.TierFair {
		t.Errorf("the default scheduler: %+v", s)
	}
}

// TestConfigValidateNamesTheFlag: each setting out of range is refused
// naming the flag that sets it.
func TestConfigValidateNamesTheFlag(t *testing.T) {
	for flag, bad := range map[string]func(*Config){
		"--max-concurrent-requests":      func(c *Config) { c.Capacity = -1 },
		"--rate-limit-tokens-per-second": func(c *Config) { c.RefillPerSec = -1 },
		"--queue-timeout-secs":           func(c *Config) { c.QueueTimeout = 0 },
		"--queue-size":                   func(c *Config) { c.QueueSize = -1 },
		"--saturation-kv-usage":          func(c *Config) { c.KVFull = math.NaN() },
		"--priority-default-class":       func(c *Config) { c.Classes, c.DefaultClass = DefaultClasses, "urgent" },
		"--api-key-classes":              func(c *Config) { c.KeyClasses = map[string]string{"k1": "bulk"} },
		"--tenant-header":                func(c *Config) { c.TenantHeader = "x tenant" },
		"--api-key-tenants":              func(c *Config) { c.KeyTenants = map[string][]string{"k1": {"a b"}} },
	} {
		c := DefaultConfig()
		bad(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s out of range: %v, want an error naming it", flag, err)
		}
	}
}

// TestWhatNeedsKeysIsRefusedWithoutThem: a class or a tenant given to a key
// needs the keys checked; with keys, a tenant header needs tenants to name.
func TestWhatNeedsKeysIsRefusedWithoutThem(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		keys []string
		flag string
	}{
		{Config{KeyClasses: map[string]string{"k1": "bulk"}}, nil, "--api-key-classes"},
		{Config{KeyTenants: map[string][]string{"k1": {"acme"}}}, nil, "--api-key-tenants"},
		{Config{TenantHeader: "x-tenant"}, []string{"k1"}, "--tenant-header"},
	} {
		if err := tc.c.ValidateKeyed(tc.keys); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v with keys %v: %v, want an error naming %s", tc.c, tc.keys, err, tc.flag)
		}
	}
	if err := (Config{TenantHeader: "x-tenant"}).ValidateKeyed(nil); err != nil {
		t.Errorf("a tenant header without keys is taken as sent: %v", err)
	}
}

// TestLendingIsItsOwnChoiceNotTheEnginePriority: passing the class on as
// vLLM's priority does not lend reserved slots (vLLM v1 would keep a
// borrower running while the class waits); --lend-reserved-slots does.
func TestLendingIsItsOwnChoiceNotTheEnginePriority(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		lend bool
	}{{Config{EnginePriority: true}, false}, {Config{LendReserved: true}, true}, {Config{}, false}} {
		if got := tc.c.Scheduler().Lend; got != tc.lend {
			t.Errorf("engine priority %v, lend reserved %v: the scheduler lends %v, want %v",
				tc.c.EnginePriority, tc.c.LendReserved, got, tc.lend)
		}
	}
}

func TestParseReserved(t *testing.T) {
	got, err := ParseReserved("system=1, interactive=4")
	if err != nil || got["system"] != 1 || got["interactive"] != 4 || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ParseReserved("system"); err == nil {
		t.Fatal("no =: refused")
	}
}
