package store

import (
	"errors"
	"testing"
)

func TestWorkerIDsStartAtOneAndAreNeverReused(t *testing.T) {
	a := newApplier(t)
	first := a.add("http://w1:8000")
	second := a.add("http://w2:8000")
	if first != 1 || second != 2 {
		t.Fatalf("ids = %d, %d; want 1, 2", first, second)
	}
	if res := a.apply(NewRemoveWorker(second)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if again := a.add("http://w2:8000"); again != 3 {
		t.Fatalf("re-added worker got id %d, want 3 (2 is retired)", again)
	}
}

func TestWorkerIDsAreNeverReusedAcrossSnapshotRestore(t *testing.T) {
	a := newApplier(t)
	a.add("http://w1:8000")
	removed := a.add("http://w2:8000")
	a.apply(NewRemoveWorker(removed))

	restored := &logApplier{t: t, fsm: NewFSM(), index: a.index}
	if err := restoreBytes(restored.fsm, snapshotBytes(t, a.fsm)); err != nil {
		t.Fatal(err)
	}
	if id := restored.add("http://w3:8000"); id != 3 {
		t.Fatalf("first add after restore got id %d, want 3", id)
	}
}

func TestAddingTheSameURLAgainReturnsTheExistingWorker(t *testing.T) {
	a := newApplier(t)
	id := a.add("http://w1:8000")
	res := a.apply(NewAddWorker(AddWorker{URL: "HTTP://W1:8000/"}))
	if res.Err != nil || res.ID != id || res.Created {
		t.Fatalf("re-add = %+v, want existing id %d, not created", res, id)
	}
	if n := a.fsm.View().Len(); n != 1 {
		t.Fatalf("registry holds %d workers, want 1", n)
	}
	if next := a.fsm.View().NextID(); next != 2 {
		t.Fatalf("next id = %d; an idempotent add must not consume an id", next)
	}
}

func TestReAddThatContradictsTheRegistrationIsAConflict(t *testing.T) {
	a := newApplier(t)
	a.apply(NewAddWorker(AddWorker{URL: "http://w1:8000", Role: RolePrefill, Model: "m",
		BootstrapPort: 9000, Labels: map[string]string{"z": "a"}}))
	conflicts := map[string]AddWorker{
		"role":           {URL: "http://w1:8000", Role: RoleDecode},
		"model":          {URL: "http://w1:8000", Model: "other"},
		"bootstrap_port": {URL: "http://w1:8000", BootstrapPort: 9001},
		"labels":         {URL: "http://w1:8000", Labels: map[string]string{"z": "b"}},
	}
	for field, add := range conflicts {
		if res := a.apply(NewAddWorker(add)); !errors.Is(res.Err, ErrConflict) {
			t.Errorf("re-add with a different %s: err = %v, want ErrConflict", field, res.Err)
		}
	}
	same := AddWorker{URL: "http://w1:8000", Role: RolePrefill}
	if res := a.apply(NewAddWorker(same)); res.Err != nil || res.ID != 1 {
		t.Errorf("re-add that omits fields: %+v, want existing id 1", res)
	}
}

func TestCommandsOnUnknownWorkersAreRefused(t *testing.T) {
	a := newApplier(t)
	id := a.add("http://w1:8000")
	a.apply(NewRemoveWorker(id))
	for _, cmd := range []Command{NewRemoveWorker(id), NewSetWorkerState(id, StateDraining), NewRemoveWorker(99)} {
		if res := a.apply(cmd); !errors.Is(res.Err, ErrUnknownWorker) {
			t.Errorf("%s: err = %v, want ErrUnknownWorker", cmd.Kind, res.Err)
		}
	}
}

func TestDrainAndActivateChangeOnlyTheState(t *testing.T) {
	a := newApplier(t)
	id := a.add("http://w1:8000")
	if res := a.apply(NewSetWorkerState(id, StateDraining)); res.Err != nil || res.ID != id {
		t.Fatalf("drain: %+v", res)
	}
	w, _ := a.fsm.View().Worker(id)
	if w.State != StateDraining || w.URL != "http://w1:8000" || w.Role != RoleRegular {
		t.Fatalf("after drain: %+v", w)
	}
	a.apply(NewSetWorkerState(id, StateActive))
	if w, _ := a.fsm.View().Worker(id); w.State != StateActive {
		t.Fatalf("after activate: state %q", w.State)
	}
}

func TestRoutingConfigIsNilUntilSet(t *testing.T) {
	a := newApplier(t)
	if c := a.fsm.View().RoutingConfig(); c != nil {
		t.Fatalf("fresh registry has routing config %+v", c)
	}
	want := RoutingConfig{BlockSize: 64, Policy: "cache_aware", CacheThreshold: 0.5, BalanceRelThreshold: 1.5}
	a.apply(NewSetRoutingConfig(want))
	if c := a.fsm.View().RoutingConfig(); c == nil || *c != want {
		t.Fatalf("routing config = %+v, want %+v", c, want)
	}
}

func TestRefusedCommandsAdvanceTheIndexButChangeNothing(t *testing.T) {
	a := newApplier(t)
	a.add("http://w1:8000")
	before := a.fsm.View()
	res := a.applyRaw([]byte(`{"v":1,"kind":"remove_worker","remove_worker":{"id":0}}`))
	if !errors.Is(res.Err, ErrInvalid) || res.Index != 2 {
		t.Fatalf("result = %+v, want ErrInvalid at index 2", res)
	}
	after := a.fsm.View()
	if after.Index() != 2 || after.Len() != before.Len() || after.NextID() != before.NextID() {
		t.Fatalf("after refusal: index %d len %d next %d", after.Index(), after.Len(), after.NextID())
	}
}

func TestWatchChannelClosesOnTheNextApply(t *testing.T) {
	a := newApplier(t)
	reg, changed := a.fsm.Watch()
	select {
	case <-changed:
		t.Fatal("changed closed before any apply")
	default:
	}
	a.add("http://w1:8000")
	select {
	case <-changed:
	default:
		t.Fatal("changed still open after an apply")
	}
	if reg.Len() != 0 {
		t.Fatal("an old registry changed under its holder")
	}
	if now, _ := a.fsm.Watch(); now.Len() != 1 {
		t.Fatalf("new registry has %d workers, want 1", now.Len())
	}
}

func TestRegistryLookups(t *testing.T) {
	a := newApplier(t)
	a.add("http://w2:8000")
	id := a.add("http://w1:8000")
	reg := a.fsm.View()
	if w, ok := reg.WorkerByURL("http://W1:8000/"); !ok || w.ID != id {
		t.Fatalf("WorkerByURL = %+v, %v", w, ok)
	}
	if _, ok := reg.Worker(42); ok {
		t.Fatal("Worker(42) found a worker")
	}
	ws := reg.Workers()
	if len(ws) != 2 || ws[0].ID != 1 || ws[1].ID != 2 {
		t.Fatalf("Workers not sorted by id: %+v", ws)
	}
}

func TestRegistryIsNotChangedByLaterCommands(t *testing.T) {
	a := newApplier(t)
	id := a.add("http://w1:8000")
	old := a.fsm.View()
	before := stateOf(t, old)
	a.apply(NewSetWorkerState(id, StateDraining))
	a.add("http://w2:8000")
	a.apply(NewRemoveWorker(id))
	if after := stateOf(t, old); after != before {
		t.Fatalf("held registry changed:\nbefore %s\nafter  %s", before, after)
	}
}
