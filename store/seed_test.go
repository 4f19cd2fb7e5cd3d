package store

import (
	"errors"
	"testing"
)

func seedOf(urls ...string) Seed {
	cfg := baseConfig()
	s := Seed{Routing: &cfg}
	for _, u := range urls {
		s.Workers = append(s.Workers, AddWorker{URL: u})
	}
	return s
}

func TestASeedAppliesOncePerRegistry(t *testing.T) {
	a := newApplier(t)
	if res := a.apply(NewSeed(seedOf("http://a:8000", "http://b:8000"))); res.Err != nil || !res.Created {
		t.Fatalf("first seed: %+v, want applied", res)
	}
	b, _ := a.fsm.View().WorkerByURL("http://b:8000")
	a.apply(NewRemoveWorker(b.ID))
	// The next start seeds again, with the worker the operator removed and
	// one more: neither comes in, and the removed one does not come back.
	if res := a.apply(NewSeed(seedOf("http://a:8000", "http://b:8000", "http://c:8000"))); res.Err != nil || res.Created {
		t.Fatalf("second seed: %+v, want a no-op", res)
	}
	reg := a.fsm.View()
	if _, ok := reg.WorkerByURL("http://b:8000"); ok || reg.Len() != 1 || !reg.Seeded() {
		t.Fatalf("after the second seed: %d workers %+v seeded=%v, want only a", reg.Len(), reg.Workers(), reg.Seeded())
	}
}

// TestTheFirstSeedWithWorkersRegistersThemAfterSeedsWithout: the replicas
// of a tier start together and any of them may seed first; a joiner
// without --worker-urls seeding before the one that has them must not
// leave the tier with no workers. Once workers came in, later seeds are
// no-ops again, whether or not a snapshot lies between.
func TestTheFirstSeedWithWorkersRegistersThemAfterSeedsWithout(t *testing.T) {
	a := newApplier(t)
	if res := a.apply(NewSeed(seedOf())); res.Err != nil || !res.Created {
		t.Fatalf("a seed without workers: %+v, want applied", res)
	}
	if !a.fsm.View().Seeded() {
		t.Fatal("a seed without workers did not mark the registry seeded (readiness waits on it)")
	}
	a.apply(NewSeed(seedOf())) // a second joiner
	restored := NewFSM()
	if err := restoreBytes(restored, snapshotBytes(t, a.fsm)); err != nil {
		t.Fatal(err)
	}
	for name, fsm := range map[string]*FSM{"live": a.fsm, "restored from a snapshot": restored} {
		b := &logApplier{t: t, fsm: fsm, index: a.index}
		if res := b.apply(NewSeed(seedOf("http://a:8000", "http://b:8000"))); res.Err != nil || !res.Created {
			t.Fatalf("%s: the seed with workers after seeds without: %+v, want applied", name, res)
		}
		if res := b.apply(NewSeed(seedOf("http://c:8000"))); res.Err != nil || res.Created {
			t.Fatalf("%s: a second seed with workers: %+v, want a no-op", name, res)
		}
		if reg := fsm.View(); reg.Len() != 2 {
			t.Fatalf("%s: %d workers %+v, want a and b", name, reg.Len(), reg.Workers())
		}
	}
}

func TestASeedKeepsARoutingConfigAlreadySet(t *testing.T) {
	a := newApplier(t)
	set := baseConfig()
	set.CacheThreshold = 0.7
	a.apply(NewSetRoutingConfig(set))
	a.apply(NewSeed(seedOf("http://a:8000")))
	if c := a.fsm.View().RoutingConfig(); c == nil || c.CacheThreshold != 0.7 || a.fsm.View().RoutingIndex() != 1 {
		t.Fatalf("routing %+v at %d, want the one set at index 1", c, a.fsm.View().RoutingIndex())
	}
}

func TestRoutingConfigCompareAndSet(t *testing.T) {
	a := newApplier(t)
	first := baseConfig()
	if res := a.apply(NewCompareAndSetRoutingConfig(first, 0)); res.Err != nil {
		t.Fatalf("set on a registry without config: %v", res.Err)
	}
	at := a.fsm.View().RoutingIndex()
	if at != 1 {
		t.Fatalf("routing index %d, want 1", at)
	}
	a.add("http://w:8000") // other writes do not move the routing version
	second := first
	second.Policy = "round_robin"
	if res := a.apply(NewCompareAndSetRoutingConfig(second, 0)); !errors.Is(res.Err, ErrConflict) {
		t.Fatalf("a stale compare-and-set: %v, want ErrConflict", res.Err)
	}
	if res := a.apply(NewCompareAndSetRoutingConfig(second, at)); res.Err != nil {
		t.Fatalf("a current compare-and-set: %v", res.Err)
	}
	if c := a.fsm.View().RoutingConfig(); c.Policy != "round_robin" || a.fsm.View().RoutingIndex() != 4 {
		t.Fatalf("routing %+v at %d, want round_robin at 4", c, a.fsm.View().RoutingIndex())
	}
}

func TestRoutingVersionAndSeedSurviveASnapshot(t *testing.T) {
	a := newApplier(t)
	a.apply(NewSeed(seedOf("http://a:8000")))
	cfg := baseConfig()
	cfg.Prefill = &RoleRouting{Policy: "cache_aware", MissPlacement: "rendezvous", CacheThreshold: 0.5, BalanceRelThreshold: 2}
	a.apply(NewCompareAndSetRoutingConfig(cfg, 1))
	restored := NewFSM()
	if err := restoreBytes(restored, snapshotBytes(t, a.fsm)); err != nil {
		t.Fatal(err)
	}
	reg := restored.View()
	if !reg.Seeded() || reg.RoutingIndex() != 2 || reg.RoutingConfig().Prefill == nil || reg.RoutingConfig().Prefill.MissPlacement != "rendezvous" {
		t.Fatalf("restored seeded=%v routing index %d config %+v", reg.Seeded(), reg.RoutingIndex(), reg.RoutingConfig())
	}
}

func TestASeedOfInvalidWorkersIsRefused(t *testing.T) {
	if _, err := NewSeed(seedOf("ftp://a")).Encode(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("seed with a bad URL: %v, want ErrInvalid", err)
	}
	bad := baseConfig()
	bad.Decode = &RoleRouting{CacheThreshold: 2}
	var fe *FieldError
	if _, err := NewSetRoutingConfig(bad).Encode(); !errors.As(err, &fe) || fe.Field != "config.decode.cache_threshold" {
		t.Fatalf("role threshold out of range: %v", err)
	}
}
