package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestHealthGenerateRunsOneTokenThroughTheEngine(t *testing.T) {
	w := startWorker(t, testConfig())
	status, h, _ := w.get(pathHealthGenerate)
	if status != http.StatusOK || h.Get(headerWorkerID) == "" {
		t.Fatalf("health_generate = %d", status)
	}
	if got := w.metric(`vllm:prefix_cache_queries_total{model_name="sim-model"}`); got != 1 {
		t.Fatalf("the engine saw %v prompt tokens, want health_generate's one", got)
	}
}

func TestHealthGenerateFailsOnAWedgedEngine(t *testing.T) {
	cfg := testConfig()
	cfg.healthGenerateTimeout = 50 * time.Millisecond
	w := startWorker(t, cfg)
	setFault(t, w, `{"mode":"wedge"}`)
	if status, _, _ := w.get(pathHealthGenerate); status != http.StatusServiceUnavailable {
		t.Fatalf("health_generate on a wedged engine = %d, want 503", status)
	}
	if status, _, _ := w.get(pathHealth); status != http.StatusOK {
		t.Fatalf("health = %d while wedged", status)
	}
	if n := inEngine(w); n != 0 {
		t.Fatalf("the timed-out health generation is still in the engine (%d)", n)
	}
}

func TestHealthGenerateSuffersTheErrorsAndSlowHealthFaults(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"errors","rate":1}`)
	if status, _, _ := w.get(pathHealthGenerate); status != http.StatusServiceUnavailable {
		t.Fatalf("health_generate under the errors fault = %d, want 503", status)
	}
	setFault(t, w, `{"mode":"slow_health","delay_ms":200}`)
	start := time.Now()
	if status, _, _ := w.get(pathHealthGenerate); status != http.StatusOK || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("health_generate under slow_health answered %d after %v", status, time.Since(start))
	}
}

// cachedAfterRepeat sends a long prompt and reports how many of its tokens were found cached.
func cachedAfterRepeat(w *testWorker, prompt string) int {
	w.t.Helper()
	_, _, body := w.post(pathCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, prompt))
	return decode(w.t, body).Usage.PromptTokensDetails.CachedTokens
}

func TestFlushCacheAndResetPrefixCacheEmptyThePrefixCache(t *testing.T) {
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, pathFlushCache}, {http.MethodGet, pathFlushCache}, {http.MethodPost, pathResetPrefixCache},
	} {
		w := startWorker(t, testConfig())
		prompt := longPrompt("flush", 4000)
		cachedAfterRepeat(w, prompt)
		if got := cachedAfterRepeat(w, prompt); got == 0 {
			t.Fatalf("%s: the repeated prompt was not cached", c.path)
		}
		hits := w.metric(`vllm:prefix_cache_hits_total{model_name="sim-model"}`)
		req, _ := http.NewRequest(c.method, w.url+c.path, nil)
		resp, err := w.client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %v %v", c.method, c.path, resp, err)
		}
		resp.Body.Close()
		if got := cachedAfterRepeat(w, prompt); got != 0 {
			t.Errorf("%s %s: %d tokens still cached", c.method, c.path, got)
		}
		if got := w.metric(`vllm:prefix_cache_hits_total{model_name="sim-model"}`); got != hits {
			t.Errorf("%s: prefix cache hits went from %v to %v across the flush", c.path, hits, got)
		}
	}
}

func TestFlushIsRefusedWhileRequestsHoldTheCache(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	conn, _ := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x"}`)
	defer conn.Close()
	waitFor(t, "the request to reach the engine", func() bool { return inEngine(w) == 1 })
	status, h, body := w.post(pathFlushCache, ``)
	if status != http.StatusBadRequest || h.Get("Content-Type") != "text/plain; charset=utf-8" || len(body) == 0 {
		t.Errorf("flush_cache while busy = %d %q %q", status, h.Get("Content-Type"), body)
	}
	status, _, body = w.post(pathResetPrefixCache, ``)
	if c := decode(t, body); status != http.StatusConflict || c.Error == nil {
		t.Errorf("reset_prefix_cache while busy = %d %s", status, body)
	}
	setFault(t, w, `{"mode":"none"}`)
	waitFor(t, "the request to finish", func() bool { return inEngine(w) == 0 })
	if status, _, body := w.post(pathFlushCache, ``); status != http.StatusOK {
		t.Errorf("flush_cache once idle = %d %s", status, body)
	}
}

func TestModelAndServerInfo(t *testing.T) {
	prefill, _ := pdWorkers(t)
	var model struct {
		ModelPath    string `json:"model_path"`
		IsGeneration bool   `json:"is_generation"`
	}
	_, _, b := prefill.get(pathModelInfo)
	decodeInto(t, b, &model)
	if model.ModelPath != "sim-model" || !model.IsGeneration {
		t.Fatalf("get_model_info = %s", b)
	}
	var server struct {
		ModelPath         string `json:"model_path"`
		Port              int    `json:"port"`
		DPSize            int    `json:"dp_size"`
		Disaggregation    string `json:"disaggregation_mode"`
		MaxTotalNumTokens int    `json:"max_total_num_tokens"`
		InternalStates    []struct {
			NumRunningReqs int `json:"num_running_reqs"`
		} `json:"internal_states"`
	}
	_, _, b = prefill.get(pathServerInfo)
	decodeInto(t, b, &server)
	if _, port := splitAddr(t, prefill.addr); server.ModelPath != "sim-model" || server.Port != port || server.DPSize != 1 ||
		server.Disaggregation != "prefill" || server.MaxTotalNumTokens != testConfig().engine.KVCapacityTokens ||
		len(server.InternalStates) != 1 {
		t.Fatalf("get_server_info = %s", b)
	}
}
