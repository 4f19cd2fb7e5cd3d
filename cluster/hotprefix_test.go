package cluster

import (
	"context"
	"errors"
	"testing"
)

// The flags seed the registry's routing config, and every replica routes with
// the registry's: hot-prefix spreading must survive the trip, for every role.
func TestHotPrefixSettingsTravelThroughTheRegistrysConfig(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Routing.Thresholds.HotLoad, cfg.Routing.Thresholds.HotOwners = 5, 2
	cfg.Routing.PD = "vllm"
	r := &routingFollower{flags: cfg.Routing}
	seeded := r.fromFlags()
	if seeded.HotPrefixLoad != 5 || seeded.HotPrefixOwners != 2 {
		t.Fatalf("the seeded config has hot prefix load %v, owners %d; want 5 and 2", seeded.HotPrefixLoad, seeded.HotPrefixOwners)
	}
	rt := r.of(seeded)
	for role, th := range map[string]Thresholds{"regular": rt.Thresholds, "prefill": rt.PrefillThresholds, "decode": rt.DecodeThresholds} {
		if th.HotLoad != 5 || th.HotOwners != 2 {
			t.Errorf("%s routes with hot prefix load %v, owners %d; want 5 and 2", role, th.HotLoad, th.HotOwners)
		}
	}
}

func TestBadHotPrefixFlagsAreRefusedNamingTheFlag(t *testing.T) {
	for flag, change := range map[string]func(*Config){
		"hot-prefix-load":   func(c *Config) { c.Routing.Thresholds.HotLoad = -1 },
		"hot-prefix-owners": func(c *Config) { c.Routing.Thresholds.HotOwners = 0 },
	} {
		cfg := testConfig(t, t.TempDir())
		change(&cfg)
		_, err := Start(context.Background(), cfg)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != flag {
			t.Errorf("%s: err = %v, want one naming the flag", flag, err)
		}
	}
}

// A routing config stored before hot-prefix spreading existed has both of its
// fields zero. A replica must still route with it (spreading off), not log it
// as unusable and keep its own flags.
func TestAConfigStoredBeforeHotPrefixesIsStillFollowed(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	r := &routingFollower{flags: cfg.Routing}
	old := r.fromFlags()
	old.HotPrefixLoad, old.HotPrefixOwners = 0, 0
	if err := r.check(old); err != nil {
		t.Fatalf("a config stored before hot prefixes is refused: %v", err)
	}
	if th := r.of(old).Thresholds; th.HotLoad != 0 {
		t.Errorf("it routes with hot prefix load %v, want 0 (spreading off)", th.HotLoad)
	}
}
