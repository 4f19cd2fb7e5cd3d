package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// inferenceCase is one request to an inference endpoint and the engine requests it makes.
type inferenceCase struct {
	name, path, body string
	seqs             int
}

// inferenceCases covers every inference endpoint, streaming and not.
var inferenceCases = []inferenceCase{
	{"completions", pathCompletions, `{"prompt":"x","max_tokens":5}`, 1},
	{"chat", pathChatCompletions, `{"messages":[{"role":"user","content":"x"}],"max_tokens":5}`, 1},
	{"embeddings", pathEmbeddings, `{"input":["a","b"]}`, 2},
	{"rerank", pathRerank, `{"query":"q","documents":["a","b","c"]}`, 3},
	{"rerank v1", pathRerankV1, `{"query":"q","documents":[{"text":"a"}]}`, 1},
	{"rerank v2", pathRerankV2, `{"query":"q","documents":["a","b"]}`, 2},
	{"responses", pathResponses, `{"input":"x","max_output_tokens":5}`, 1},
	{"responses stream", pathResponses, `{"input":"x","max_output_tokens":5,"stream":true}`, 1},
	{"generate", pathGenerate, `{"text":"x","sampling_params":{"max_new_tokens":5}}`, 1},
	{"generate stream", pathGenerate, `{"text":"x","sampling_params":{"max_new_tokens":5},"stream":true}`, 1},
}

// inEngine is the number of requests the engine holds, running or waiting.
func inEngine(w *testWorker) int64 {
	return w.s.driver.stats.running.Load() + w.s.driver.stats.waiting.Load()
}

func decodeInto(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("response is not the JSON expected: %v\n%s", err, body)
	}
}

func TestEveryInferenceEndpointAnswersAndIsCounted(t *testing.T) {
	w := startWorker(t, testConfig())
	counts, seqs := map[string]int{}, 0
	for _, c := range inferenceCases {
		seqs += c.seqs
		status, h, body := w.post(c.path, c.body)
		if status != http.StatusOK || h.Get(headerWorkerID) != w.addr {
			t.Errorf("%s: status %d, x-worker-id %q: %s", c.name, status, h.Get(headerWorkerID), body)
		}
		counts[c.path]++
	}
	for path, n := range counts {
		if got := w.metric(fmt.Sprintf("workersim_requests_total{path=%q}", path)); int(got) != n {
			t.Errorf("requests counted for %s = %v, want %d", path, got, n)
		}
	}
	if got := w.metric(`vllm:request_success_total{finished_reason="length",model_name="sim-model"}`); int(got) != seqs {
		t.Errorf("engine requests completed = %v, want the %d sequences sent", got, seqs)
	}
}

func TestErrorsFaultFailsEveryInferenceEndpoint(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"errors","rate":1}`)
	for _, c := range inferenceCases {
		status, h, body := w.post(c.path, c.body)
		if e := decode(t, body).Error; status != http.StatusInternalServerError || e == nil || e.Code != "injected_fault" ||
			h.Get(headerWorkerID) == "" {
			t.Errorf("%s: status %d, body %s", c.name, status, body)
		}
	}
	if got := w.metric(`workersim_requests_failed_total{reason="injected_fault"}`); int(got) != len(inferenceCases) {
		t.Errorf("injected failures counted = %v, want %d", got, len(inferenceCases))
	}
	if running := w.s.driver.stats.running.Load(); running != 0 {
		t.Errorf("%d failed requests reached the engine", running)
	}
}

// TestWedgeHoldsEveryInferenceEndpointAndLeavingCancels: on a wedged engine each request gets in
// and stays (running, or queued behind the step that never ends); its client leaving cancels
// every sequence it had in the engine, counted once.
func TestWedgeHoldsEveryInferenceEndpointAndLeavingCancels(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	for i, c := range inferenceCases {
		conn, _ := rawRequest(t, w.addr, c.path, c.body)
		waitFor(t, c.name+" to reach the engine", func() bool { return inEngine(w) == int64(c.seqs) })
		conn.Close()
		waitFor(t, c.name+" to be cancelled", func() bool {
			return inEngine(w) == 0 && w.metric("workersim_requests_cancelled_total") == float64(i+1)
		})
	}
}

// TestClientLeavingMidStreamCancelsEveryStreamingEndpoint: a client that reads the first event of
// a long stream and leaves has its generation cancelled.
func TestClientLeavingMidStreamCancelsEveryStreamingEndpoint(t *testing.T) {
	cfg := testConfig()
	cfg.timeScale = 10
	w := startWorker(t, cfg)
	streams := []inferenceCase{
		{"chat", pathChatCompletions, `{"messages":[{"role":"user","content":"x"}],"max_tokens":100000,"stream":true}`, 1},
		{"responses", pathResponses, `{"input":"x","max_output_tokens":100000,"stream":true}`, 1},
		{"generate", pathGenerate, `{"text":"x","sampling_params":{"max_new_tokens":100000},"stream":true}`, 1},
	}
	for i, c := range streams {
		conn, r := rawRequest(t, w.addr, c.path, c.body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if strings.HasPrefix(line, "data: ") {
				break
			}
		}
		conn.Close()
		waitFor(t, c.name+" to be cancelled", func() bool {
			return w.s.driver.stats.running.Load() == 0 &&
				w.metric("workersim_requests_cancelled_total") == float64(i+1)
		})
	}
}
