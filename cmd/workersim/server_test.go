package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestEveryResponseCarriesWorkerID(t *testing.T) {
	cfg := testConfig()
	cfg.workerID = "gpu-7"
	w := startWorker(t, cfg)
	checks := []func() (int, http.Header, []byte){
		func() (int, http.Header, []byte) { return w.get(pathHealth) },
		func() (int, http.Header, []byte) { return w.get(pathModels) },
		func() (int, http.Header, []byte) { return w.get(pathMetrics) },
		func() (int, http.Header, []byte) { return w.get("/nowhere") },
		func() (int, http.Header, []byte) { return w.post(pathCompletions, `{"prompt":"hi","max_tokens":2}`) },
		func() (int, http.Header, []byte) { return w.post(pathCompletions, `{"prompt":`) },
		func() (int, http.Header, []byte) { return w.post(pathEmbeddings, `{"input":"hi"}`) },
		func() (int, http.Header, []byte) { return w.post(pathRerank, `{"query":"q","documents":["d"]}`) },
		func() (int, http.Header, []byte) {
			return w.post(pathResponses, `{"input":"hi","max_output_tokens":1}`)
		},
		func() (int, http.Header, []byte) { return w.get(pathResponses + "/resp_nope") },
		func() (int, http.Header, []byte) { return w.post(pathGenerate, `{"text":"hi"}`) },
		func() (int, http.Header, []byte) { return w.get(pathHealthGenerate) },
		func() (int, http.Header, []byte) { return w.get(pathModelInfo) },
		func() (int, http.Header, []byte) { return w.get(pathServerInfo) },
		func() (int, http.Header, []byte) { return w.post(pathFlushCache, ``) },
		func() (int, http.Header, []byte) { return w.post(pathResetPrefixCache, ``) },
	}
	for i, check := range checks {
		if _, h, _ := check(); h.Get(headerWorkerID) != "gpu-7" {
			t.Errorf("response %d: x-worker-id = %q, want gpu-7", i, h.Get(headerWorkerID))
		}
	}
}

func TestWorkerIDDefaultsToBoundAddress(t *testing.T) {
	w := startWorker(t, testConfig())
	if _, h, _ := w.get(pathHealth); h.Get(headerWorkerID) != w.addr {
		t.Fatalf("x-worker-id = %q, want %q", h.Get(headerWorkerID), w.addr)
	}
}

func TestCompletionAnswersWithUsageAndFillerText(t *testing.T) {
	w := startWorker(t, testConfig())
	status, h, body := w.post(pathCompletions, `{"model":"sim-model","prompt":["0123456789","abcdef"],"max_tokens":3}`)
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, content type %q: %s", status, h.Get("Content-Type"), body)
	}
	c := decode(t, body)
	if c.Choices[0].Text != " tok tok tok" || c.Choices[0].FinishReason != "length" {
		t.Fatalf("choice = %+v", c.Choices[0])
	}
	if c.Usage.PromptTokens != 4 || c.Usage.CompletionTokens != 3 || c.Usage.TotalTokens != 7 {
		t.Fatalf("usage = %+v, want 4 prompt (16 bytes) + 3 completion", c.Usage)
	}
}

func TestChatCompletionAnswersWithAMessage(t *testing.T) {
	w := startWorker(t, testConfig())
	status, _, body := w.post(pathChatCompletions,
		`{"model":"sim-model","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}],"max_completion_tokens":2}`)
	c := decode(t, body)
	if status != http.StatusOK || c.Choices[0].Message.Content != " tok tok" {
		t.Fatalf("status %d, body %s", status, body)
	}
	if c.Usage.PromptTokens != 3 { // "user\nhello\n" is 11 bytes
		t.Fatalf("prompt tokens = %d, want 3", c.Usage.PromptTokens)
	}
}

func TestRepeatedPromptReportsCachedTokens(t *testing.T) {
	w := startWorker(t, testConfig())
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, longPrompt("cache", 4000))
	_, _, first := w.post(pathCompletions, body)
	_, _, second := w.post(pathCompletions, body)
	c1, c2 := decode(t, first), decode(t, second)
	if c1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request found %d cached tokens", c1.Usage.PromptTokensDetails.CachedTokens)
	}
	if got := c2.Usage.PromptTokensDetails.CachedTokens; got < c2.Usage.PromptTokens-16 {
		t.Fatalf("second request found %d of %d tokens cached", got, c2.Usage.PromptTokens)
	}
	if hits := w.metric(`vllm:prefix_cache_hits_total{model_name="sim-model"}`); int(hits) != c2.Usage.PromptTokensDetails.CachedTokens {
		t.Fatalf("prefix cache hits metric = %v", hits)
	}
}

func TestUnknownModelIsNotFound(t *testing.T) {
	w := startWorker(t, testConfig())
	status, _, body := w.post(pathChatCompletions, `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`)
	c := decode(t, body)
	if status != http.StatusNotFound || c.Error == nil || c.Error.Code != "model_not_found" || c.Error.Message == "" {
		t.Fatalf("status %d, body %s", status, body)
	}
	if n := w.metric(`workersim_requests_failed_total{reason="model_not_found"}`); n != 1 {
		t.Fatalf("failed metric = %v", n)
	}
}

func TestMalformedRequestsAreBadRequests(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{"prompt":`, `[]`, `{"prompt":5}`, `{"prompt":"a","max_tokens":0}`,
		`{"prompt":"a","stream":"yes"}`, `{"prompt":"a","max_tokens":100000000}`} {
		status, _, resp := w.post(pathCompletions, body)
		if c := decode(t, resp); status != http.StatusBadRequest || c.Error == nil || c.Error.Type != "invalid_request_error" {
			t.Errorf("%s: status %d, body %s", body, status, resp)
		}
	}
	if status, _, resp := w.post(pathChatCompletions, `{"prompt":"a"}`); status != http.StatusBadRequest {
		t.Errorf("chat without messages: status %d, body %s", status, resp)
	}
}

func TestModelsListsServedModels(t *testing.T) {
	cfg := testConfig()
	cfg.models = []string{"a", "b"}
	w := startWorker(t, cfg)
	_, _, body := w.get(pathModels)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Object != "list" || len(list.Data) != 2 ||
		list.Data[0].ID != "a" || list.Data[1].ID != "b" || list.Data[1].Object != "model" {
		t.Fatalf("models = %s (%v)", body, err)
	}
	if status, _, _ := w.post(pathCompletions, `{"model":"b","prompt":"x","max_tokens":1}`); status != http.StatusOK {
		t.Fatalf("second model refused: %d", status)
	}
}

func TestMetricsExposeVLLMNames(t *testing.T) {
	cfg := testConfig()
	cfg.engine.KVCapacityTokens = 1600
	w := startWorker(t, cfg)
	w.post(pathCompletions, `{"prompt":"hello","max_tokens":1}`)
	for name, want := range map[string]float64{
		`vllm:cache_config_info{block_size="16",num_gpu_blocks="100"}`: 1,
		`vllm:num_requests_running{model_name="sim-model"}`:            0,
		`vllm:num_requests_waiting{model_name="sim-model"}`:            0,
		`vllm:kv_cache_usage_perc{model_name="sim-model"}`:             0,
		`vllm:prefix_cache_queries_total{model_name="sim-model"}`:      2,
		`workersim_requests_total{path="/v1/completions"}`:             1,
		`workersim_requests_cancelled_total`:                           0,
	} {
		if got := w.metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// Every family the worker serves has a help line with text, read by
// Prometheus' own parser (the tests that check the router do the same).
func TestEveryMetricFamilyHasHelpText(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	w := startWorker(t, testConfig())
	w.post(pathCompletions, `{"prompt":"hello","max_tokens":1}`)
	_, _, body := w.get(pathMetrics)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus cannot parse /metrics: %v", err)
	}
	if len(families) < 10 {
		t.Fatalf("only %d families", len(families))
	}
	for name, f := range families {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text: describe it in metrics_help.go", name)
		}
	}
}
