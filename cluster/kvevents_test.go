package cluster

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

func TestAWorkersKVEventSocketsDefaultToItsHostOnVLLMsPorts(t *testing.T) {
	h := &kvHub{cfg: KVEvents{Enabled: true}}
	got, err := h.endpoints(storeWorker(3, "http://127.0.0.1:8000", ""))
	if err != nil || got.Endpoint != "tcp://127.0.0.1:5557" || got.ReplayEndpoint != "tcp://127.0.0.1:5558" {
		t.Fatalf("default: %+v, %v", got, err)
	}
	h.cfg.ReplayOffset = -1
	got, err = h.endpoints(storeWorker(3, "http://127.0.0.1:8000", "tcp://127.0.0.1:7000"))
	if err != nil || got.Endpoint != "tcp://127.0.0.1:7000" || got.ReplayEndpoint != "" {
		t.Fatalf("given, no replay: %+v, %v", got, err)
	}
}

func TestAKVEventsEndpointOnARefusedAddressIsNeverDialed(t *testing.T) {
	h := &kvHub{policy: workerurl.HostPolicy{}}
	if _, err := h.allow("169.254.169.254:5557"); err == nil {
		t.Fatal("a metadata address was allowed")
	}
	if addr, err := h.allow("127.0.0.1:5557"); err != nil || addr != "127.0.0.1:5557" {
		t.Fatalf("loopback: %q, %v", addr, err)
	}
}

func storeWorker(id uint32, url, ep string) store.Worker {
	return store.Worker{ID: store.WorkerID(id), URL: url, Role: store.RoleRegular, KVEventsEndpoint: ep}
}
