package discovery

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The API server source speaks the API server's REST protocol: a loopback
// server answers the list with one ready pod, and the watch with a second
// one added.
func TestTheAPIServerSourceListsAndWatches(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	listed, added := pod("vllm-a", "127.0.0.11", vllm, true), pod("vllm-b", "127.0.0.12", vllm, true)
	listed.ResourceVersion, added.ResourceVersion = "7", "8"
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/"+ns+"/pods" || r.URL.Query().Get("labelSelector") != "app=vllm" {
			t.Errorf("request %s", r.URL)
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{*listed}})
			return
		}
		added.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": added})
		w.(http.Flusher).Flush()
		select { // a watch stays open until the client leaves
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	source, err := NewAPIServerSource(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t)
	w, err := New(Config{Pods: source, Namespace: ns, Port: 8000, Selectors: []RoleSelector{
		{"regular", mustSelector(t, "app=vllm")}}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	waitFor(t, reg, "http://127.0.0.11:8000 regular kubernetes", "http://127.0.0.12:8000 regular kubernetes")
}
