package cluster

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/store"
)

// A worker's kv_events_endpoint is kept in the registry, and one on a
// refused destination is refused naming the field, without contacting it.
func TestAdminKeepsAWorkersKVEventsEndpointAndRefusesARefusedOne(t *testing.T) {
	n := openNode(t, "n1", t.TempDir(), "127.0.0.1:0", true)
	waitLeader(t, n)
	c := serveAdmin(t, NewAdmin(AdminConfig{Registry: n.fsm.View, Apply: n.Apply, AllowWorker: workerurl.HostPolicy{}.Allows}))
	r := c.do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"tcp://169.254.169.254:5557"}`)
	expectStatus(t, r, http.StatusBadRequest)
	if e := r.apiError(t); !strings.Contains(e.Message, "kv_events_endpoint") {
		t.Fatalf("error %+v, want one naming kv_events_endpoint", e)
	}
	expectStatus(t, c.do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"http://127.0.0.1:5557"}`), http.StatusBadRequest)
	if n.fsm.View().Len() != 0 {
		t.Fatal("a refused endpoint reached the registry")
	}
	r = c.do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"TCP://127.0.0.1:6000"}`)
	expectStatus(t, r, http.StatusCreated)
	ws := n.fsm.View().Workers()
	if len(ws) != 1 || ws[0].KVEventsEndpoint != "tcp://127.0.0.1:6000" {
		t.Fatalf("registry %+v", ws)
	}
}

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
