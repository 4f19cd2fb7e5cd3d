package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/cluster/admin/admintest"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// A worker's kv_events_endpoint is kept in the registry, and one on a
// refused destination is refused naming the field, without contacting it.
func TestAdminKeepsAWorkersKVEventsEndpointAndRefusesARefusedOne(t *testing.T) {
	c, n := raftAdmin(t, Config{AllowWorker: workerurl.HostPolicy{}.Allows})
	r := c.Do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"tcp://169.254.169.254:5557"}`)
	admintest.ExpectStatus(t, r, http.StatusBadRequest)
	if e := r.APIError(t); !strings.Contains(e.Message, "kv_events_endpoint") {
		t.Fatalf("error %+v, want one naming kv_events_endpoint", e)
	}
	admintest.ExpectStatus(t, c.Do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"http://127.0.0.1:5557"}`), http.StatusBadRequest)
	if n.FSM.View().Len() != 0 {
		t.Fatal("a refused endpoint reached the registry")
	}
	r = c.Do("POST", "/workers", `{"url":"http://127.0.0.1:8000","kv_events_endpoint":"TCP://127.0.0.1:6000"}`)
	admintest.ExpectStatus(t, r, http.StatusCreated)
	ws := n.FSM.View().Workers()
	if len(ws) != 1 || ws[0].KVEventsEndpoint != "tcp://127.0.0.1:6000" {
		t.Fatalf("registry %+v", ws)
	}
}
