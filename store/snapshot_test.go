package store

import (
	"errors"
	"strings"
	"testing"
)

func TestSnapshotRestoreRoundTripsEverything(t *testing.T) {
	a := newApplier(t)
	a.apply(NewAddWorker(AddWorker{URL: "http://p:8000", Role: RolePrefill, Model: "m",
		BootstrapPort: 8998, Labels: map[string]string{"zone": "a"}}))
	drained := a.add("http://d:8000")
	gone := a.add("http://gone:8000")
	a.apply(NewSetWorkerState(drained, StateDraining))
	a.apply(NewRemoveWorker(gone))
	a.apply(NewSetRoutingConfig(RoutingConfig{BlockSize: 256, Policy: "cache_aware",
		MissPlacement: "least_load", CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5}))

	restored := NewFSM()
	if err := restoreBytes(restored, snapshotBytes(t, a.fsm)); err != nil {
		t.Fatal(err)
	}
	if got, want := stateOf(t, restored.View()), stateOf(t, a.fsm.View()); got != want {
		t.Fatalf("restored registry differs\n got %s\nwant %s", got, want)
	}
	if restored.View().NextID() != 4 || restored.View().Index() != 6 {
		t.Fatalf("next id %d index %d, want 4 and 6", restored.View().NextID(), restored.View().Index())
	}
}

func TestRestoreNotifiesWatchers(t *testing.T) {
	src := newApplier(t)
	src.add("http://w:1")
	f := NewFSM()
	_, changed := f.Watch()
	if err := restoreBytes(f, snapshotBytes(t, src.fsm)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("restore did not close the watch channel")
	}
}

func TestRestoreRefusesInconsistentSnapshotsAndKeepsTheState(t *testing.T) {
	w := `{"id":1,"url":"http://a:1","role":"regular","model":"","bootstrap_port":0,"state":"active"}`
	cases := map[string]struct {
		doc  string
		want error
	}{
		"newer version":    {`{"v":9,"index":1,"next_id":2,"workers":[]}`, ErrUnsupportedVersion},
		"next id zero":     {`{"v":1,"index":1,"next_id":0,"workers":[]}`, ErrInvalid},
		"id at next id":    {`{"v":1,"index":1,"next_id":1,"workers":[` + w + `]}`, ErrInvalid},
		"ids out of order": {`{"v":1,"index":1,"next_id":9,"workers":[` + w + `,` + w + `]}`, ErrInvalid},
		"unnormalised url": {`{"v":1,"index":1,"next_id":9,"workers":[` +
			strings.Replace(w, "http://a:1", "HTTP://a:1/", 1) + `]}`, ErrInvalid},
		"bad role": {`{"v":1,"index":1,"next_id":9,"workers":[` +
			strings.Replace(w, `"regular"`, `"boss"`, 1) + `]}`, ErrInvalid},
		"bad config":    {`{"v":1,"index":1,"next_id":1,"workers":[],"routing_config":{"block_size":0}}`, ErrInvalid},
		"unknown field": {`{"v":1,"index":1,"next_id":1,"workers":[],"extra":true}`, ErrInvalid},
		"not json":      {`[`, ErrInvalid},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := newApplier(t)
			a.add("http://keep:1")
			before := stateOf(t, a.fsm.View())
			if err := restoreBytes(a.fsm, []byte(tc.doc)); !errors.Is(err, tc.want) {
				t.Fatalf("restore err = %v, want %v", err, tc.want)
			}
			if after := stateOf(t, a.fsm.View()); after != before {
				t.Fatalf("failed restore changed the state to %s", after)
			}
		})
	}
}
