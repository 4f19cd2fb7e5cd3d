package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Each endpoint vllm-router serves, through a router process in front of
// workersim processes.

func call(t *testing.T, method, u, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func expect(t *testing.T, what string, status, want int, body string) {
	t.Helper()
	if status != want {
		t.Fatalf("%s: %d %s, want %d", what, status, body, want)
	}
}

func TestEndToEndEveryVLLMRouterEndpoint(t *testing.T) {
	router, workersim := binaries(t)
	_, w0 := startWorkersim(t, workersim, "w0")
	_, w1 := startWorkersim(t, workersim, "w1")
	base := startRouterProcess(t, router, "--worker-urls", w0+","+w1)

	status, _, body := call(t, "POST", base+"/v1/embeddings", `{"model":"sim-model","input":["a first text","a second text"]}`)
	expect(t, "embeddings", status, 200, body)
	var emb struct {
		Data []struct{ Embedding []float64 }
	}
	if json.Unmarshal([]byte(body), &emb); len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings %s", body)
	}
	for _, path := range []string{"/v1/rerank", "/rerank"} {
		status, _, body = call(t, "POST", base+path, `{"model":"sim-model","query":"q","documents":["one","two","three"],"top_n":2}`)
		expect(t, path, status, 200, body)
		if strings.Count(body, "relevance_score") != 2 {
			t.Fatalf("%s: %s", path, body)
		}
	}
	status, _, body = call(t, "POST", base+"/generate", `{"text":"Once upon a time","sampling_params":{"max_new_tokens":4}}`)
	expect(t, "generate", status, 200, body)
	if !strings.Contains(body, `"meta_info"`) {
		t.Fatalf("generate %s", body)
	}
	for _, path := range []string{"/health_generate", "/get_model_info", "/get_server_info"} {
		status, _, body = call(t, "GET", base+path, "")
		expect(t, path, status, 200, body)
	}
	status, _, body = call(t, "POST", base+"/flush_cache", "{}") // admin writes without a token say JSON
	expect(t, "flush_cache", status, 200, body)
	if strings.Count(body, `"id"`) != 2 || strings.Contains(body, `"error"`) {
		t.Fatalf("flush_cache %s", body)
	}
	status, _, body = call(t, "GET", base+"/workers/"+url.PathEscape(w1), "")
	expect(t, "worker by URL", status, 200, body)
	if !strings.Contains(body, w1) {
		t.Fatalf("worker by URL %s", body)
	}
	_, _, body = call(t, "GET", base+"/get_loads", "")
	if strings.Count(body, `"worker":"http://`) != 2 {
		t.Fatalf("get_loads rows lack worker: %s", body)
	}
}

// TestEndToEndStoredResponsesAreServedByTheWorkerThatMadeThem: the
// Responses API keeps its objects on one worker; every request about one,
// and a continuation of it, goes there.
func TestEndToEndStoredResponsesAreServedByTheWorkerThatMadeThem(t *testing.T) {
	router, workersim := binaries(t)
	_, w0 := startWorkersim(t, workersim, "w0")
	_, w1 := startWorkersim(t, workersim, "w1")
	base := startRouterProcess(t, router, "--worker-urls", w0+","+w1)
	status, hdr, body := call(t, "POST", base+"/v1/responses", `{"model":"sim-model","input":"Hello there","max_output_tokens":4}`)
	expect(t, "create", status, 200, body)
	var created struct{ ID string }
	if json.Unmarshal([]byte(body), &created); !strings.HasPrefix(created.ID, "resp_") {
		t.Fatalf("create %s", body)
	}
	owner := hdr.Get("x-worker-id")
	for range 4 { // other workers would answer 404
		status, hdr, body = call(t, "GET", base+"/v1/responses/"+created.ID, "")
		expect(t, "retrieve", status, 200, body)
		if hdr.Get("x-worker-id") != owner {
			t.Fatalf("retrieved from %s, made by %s", hdr.Get("x-worker-id"), owner)
		}
	}
	status, _, body = call(t, "GET", base+"/v1/responses/"+created.ID+"/input", "")
	expect(t, "input", status, 200, body)
	cont := fmt.Sprintf(`{"model":"sim-model","input":"And then?","previous_response_id":%q,"max_output_tokens":4}`, created.ID)
	status, hdr, body = call(t, "POST", base+"/v1/responses", cont)
	expect(t, "continue", status, 200, body)
	if hdr.Get("x-worker-id") != owner {
		t.Fatalf("continued on %s, made by %s", hdr.Get("x-worker-id"), owner)
	}
	status, _, body = call(t, "DELETE", base+"/v1/responses/"+created.ID, "")
	expect(t, "delete", status, 200, body)
	status, _, body = call(t, "GET", base+"/v1/responses/"+created.ID, "")
	expect(t, "retrieve after delete", status, 404, body)
	status, _, body = call(t, "GET", base+"/v1/responses/resp_unknown", "")
	expect(t, "an unknown id", status, 404, body)
}
