package cluster

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/dialtest"

	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

func TestAWorkersKVEventSocketsDefaultToItsHostOnVLLMsPorts(t *testing.T) {
	h := &kvHub{cfg: KVEvents{Enabled: true}}
	got, err := h.hubWorker(storeWorker(3, "http://127.0.0.1:8000", ""))
	if err != nil || got.Endpoint != "tcp://127.0.0.1:5557" || got.ReplayEndpoint != "tcp://127.0.0.1:5558" ||
		got.Host != "127.0.0.1:8000" {
		t.Fatalf("default: %+v, %v", got, err)
	}
	h.cfg.ReplayOffset = -1
	got, err = h.hubWorker(storeWorker(3, "http://127.0.0.1:8000", "tcp://127.0.0.1:7000"))
	if err != nil || got.Endpoint != "tcp://127.0.0.1:7000" || got.ReplayEndpoint != "" {
		t.Fatalf("given, no replay: %+v, %v", got, err)
	}
}

// With a bound socket, a worker that names no endpoint is not dialed (its
// engine dials the tier), while one that names its endpoint still is; the
// replay socket stays on the engine's host.
func TestWithABoundSocketOnlyWorkersThatNameTheirEndpointAreDialed(t *testing.T) {
	h := &kvHub{cfg: KVEvents{Enabled: true, Bind: "tcp://127.0.0.1:5557"}}
	w := storeWorker(3, "http://127.0.0.1:8000", "")
	w.KVEventsTopic = "engine-3"
	got, err := h.hubWorker(w)
	if err != nil || got.Endpoint != "" || got.ReplayEndpoint != "tcp://127.0.0.1:5558" || got.Topic != "engine-3" {
		t.Fatalf("bound, no endpoint: %+v, %v", got, err)
	}
	got, err = h.hubWorker(storeWorker(4, "http://127.0.0.1:8001", "tcp://127.0.0.1:7000"))
	if err != nil || got.Endpoint != "tcp://127.0.0.1:7000" {
		t.Fatalf("bound, an endpoint given: %+v, %v", got, err)
	}
}

// An event endpoint is resolved and checked by the replica's dialer: a name
// that resolves to a metadata address, a metadata literal and a host outside
// --allowed-worker-hosts are refused; a name that resolves to loopback is
// dialed by that address. Nothing is looked up for real.
func TestAKVEventsEndpointOnARefusedAddressIsNeverDialed(t *testing.T) {
	resolver := dialtest.Resolver{"metadata.internal": "169.254.169.254", "engine.internal": "127.0.0.1"}
	h := &kvHub{dialer: &workerurl.Dialer{Resolver: resolver}}
	for _, refused := range []string{"169.254.169.254:5557", "metadata.internal:5557", "[fe80::1]:5557"} {
		if addr, err := h.allow(refused); !errors.Is(err, workerurl.ErrRefused) {
			t.Errorf("%s: allowed as %q (%v)", refused, addr, err)
		}
	}
	if addr, err := h.allow("engine.internal:5557"); err != nil || addr != "127.0.0.1:5557" {
		t.Fatalf("a loopback name: %q, %v", addr, err)
	}
	policy, err := workerurl.ParseHostPolicy([]string{"*.pool.internal"})
	if err != nil {
		t.Fatal(err)
	}
	h.dialer = &workerurl.Dialer{Policy: policy, Resolver: resolver}
	if addr, err := h.allow("engine.internal:5557"); !errors.Is(err, workerurl.ErrRefused) {
		t.Errorf("a host outside --allowed-worker-hosts: allowed as %q (%v)", addr, err)
	}
}

func storeWorker(id uint32, url, ep string) store.Worker {
	return store.Worker{ID: store.WorkerID(id), URL: url, Role: store.RoleRegular, KVEventsEndpoint: ep}
}
