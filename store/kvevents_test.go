package store

import (
	"errors"
	"testing"
)

func TestKVEventsEndpointsAreNormalisedOrRefusedNamingTheField(t *testing.T) {
	good := map[string]string{
		"":                        "",
		"tcp://10.0.0.5:5557":     "tcp://10.0.0.5:5557",
		"TCP://Engine-1.LAN:5557": "tcp://engine-1.lan:5557",
		"tcp://[::1]:5557/":       "tcp://[::1]:5557",
	}
	for raw, want := range good {
		if got, err := NormalizeKVEventsEndpoint(raw); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"http://h:5557", "tcp://h", "tcp://h:0", "tcp://h:99999", "tcp://u@h:1",
		"tcp://h:1/x", "tcp://h:1?q", "5557", "tcp://:5557"} {
		_, err := NormalizeKVEventsEndpoint(raw)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "kv_events_endpoint" {
			t.Errorf("%q: %v, want a kv_events_endpoint field error", raw, err)
		}
	}
}

func TestTheKVEventsEndpointIsKeptInTheRegistryAndAConflictingReAddIsRefused(t *testing.T) {
	a := newApplier(t)
	res := a.apply(NewAddWorker(AddWorker{URL: "http://10.0.0.5:8000", KVEventsEndpoint: "TCP://10.0.0.5:6000"}))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	w, _ := a.fsm.View().Worker(res.ID)
	if w.KVEventsEndpoint != "tcp://10.0.0.5:6000" {
		t.Fatalf("kept %q", w.KVEventsEndpoint)
	}
	if again := a.apply(NewAddWorker(AddWorker{URL: "http://10.0.0.5:8000"})); again.Err != nil || again.ID != res.ID {
		t.Errorf("a re-add without an endpoint: %+v", again)
	}
	if other := a.apply(NewAddWorker(AddWorker{URL: "http://10.0.0.5:8000", KVEventsEndpoint: "tcp://10.0.0.5:7000"})); !errors.Is(other.Err, ErrConflict) {
		t.Errorf("a re-add with another endpoint: %v, want a conflict", other.Err)
	}
	restored := NewFSM()
	if err := restoreBytes(restored, snapshotBytes(t, a.fsm)); err != nil {
		t.Fatal(err)
	}
	if w, _ := restored.View().Worker(res.ID); w.KVEventsEndpoint != "tcp://10.0.0.5:6000" {
		t.Errorf("after a snapshot: %q", w.KVEventsEndpoint)
	}
}

func TestTheDefaultKVEventsEndpointIsTheWorkersHostOnVLLMsPort(t *testing.T) {
	for u, want := range map[string]string{"http://10.0.0.5:8000": "tcp://10.0.0.5:5557", "http://[::1]:8000/v1": "tcp://[::1]:5557"} {
		if got, err := DefaultKVEventsEndpoint(u); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", u, got, err, want)
		}
	}
}
