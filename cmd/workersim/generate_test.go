package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// generateOutput is SGLang's /generate answer.
type generateOutput struct {
	Text      string `json:"text"`
	OutputIDs []int  `json:"output_ids"`
	MetaInfo  struct {
		ID           string `json:"id"`
		FinishReason *struct {
			Type   string `json:"type"`
			Length int    `json:"length"`
		} `json:"finish_reason"`
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		CachedTokens     int `json:"cached_tokens"`
	} `json:"meta_info"`
}

func (w *testWorker) generate(body string) generateOutput {
	w.t.Helper()
	status, _, b := w.post(pathGenerate, body)
	if status != http.StatusOK {
		w.t.Fatalf("generate %s: %d %s", body, status, b)
	}
	var g generateOutput
	decodeInto(w.t, b, &g)
	return g
}

func TestGenerateAnswersTextAndMetaInfo(t *testing.T) {
	w := startWorker(t, testConfig())
	g := w.generate(`{"text":"hello","sampling_params":{"max_new_tokens":3,"temperature":0},"rid":"r-1"}`)
	m := g.MetaInfo
	if g.Text != " tok tok tok" || len(g.OutputIDs) != 3 || m.ID != "r-1" || m.FinishReason == nil ||
		m.FinishReason.Type != "length" || m.FinishReason.Length != 3 || m.PromptTokens != 2 || m.CompletionTokens != 3 {
		t.Fatalf("answer = %+v", g)
	}
	if d := w.generate(`{"text":"x"}`); d.MetaInfo.CompletionTokens != defaultMaxNewTokens || d.MetaInfo.ID == "" {
		t.Fatalf("without sampling_params: %d tokens, rid %q", d.MetaInfo.CompletionTokens, d.MetaInfo.ID)
	}
	body := fmt.Sprintf(`{"text":%q,"sampling_params":{"max_new_tokens":1}}`, longPrompt("gen", 4000))
	w.generate(body)
	if cached := w.generate(body).MetaInfo.CachedTokens; cached != 992 {
		t.Fatalf("repeated prompt found %d tokens cached, want its 62 full blocks (992)", cached)
	}
}

func TestGenerateTakesInputIDs(t *testing.T) {
	w := startWorker(t, testConfig())
	if g := w.generate(`{"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":1}}`); g.MetaInfo.PromptTokens != 4 {
		t.Fatalf("4 input ids counted as %d prompt tokens", g.MetaInfo.PromptTokens)
	}
}

func TestGenerateStreamsTheTextSoFarThenDone(t *testing.T) {
	w := startWorker(t, testConfig())
	conn, r := rawRequest(t, w.addr, pathGenerate, `{"text":"hi","sampling_params":{"max_new_tokens":3},"stream":true}`)
	defer conn.Close()
	events := sseEvents(t, r)
	if len(events) != 4 || events[3] != "[DONE]" {
		t.Fatalf("events = %q, want 3 chunks and [DONE]", events)
	}
	for i, ev := range events[:3] {
		var g generateOutput
		if err := json.Unmarshal([]byte(ev), &g); err != nil {
			t.Fatal(err)
		}
		n := i + 1
		if g.Text != strings.Repeat(fillerToken, n) || len(g.OutputIDs) != n || g.MetaInfo.CompletionTokens != n ||
			(n < 3) != (g.MetaInfo.FinishReason == nil) {
			t.Errorf("chunk %d = %s", n, ev)
		}
	}
}

func TestGenerateRefusesBadRequests(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{}`, `{"text":"a","input_ids":[1]}`, `{"text":["a","b"]}`, `{"input_ids":[[1],[2]]}`,
		`{"text":"a","sampling_params":[]}`, `{"text":"a","sampling_params":{"max_new_tokens":0}}`, `{"text":"a","rid":5}`,
		`{"text":"a","stream":1}`} {
		if status, _, b := w.post(pathGenerate, body); status != http.StatusBadRequest {
			t.Errorf("%s: status %d, body %s", body, status, b)
		}
	}
	if status, _, _ := w.post(pathGenerate, `{"text":"a","model":"other"}`); status != http.StatusNotFound {
		t.Errorf("unknown model: status %d", status)
	}
}

// TestGenerateBootstrapPlaysTheRole: SGLang's disaggregation sends /generate with bootstrap
// fields to both workers; the prefill worker computes the prompt and one token, the decode
// worker receives the prompt and generates.
func TestGenerateBootstrapPlaysTheRole(t *testing.T) {
	prefill, decodeW := pdWorkers(t)
	body := fmt.Sprintf(`{"text":%q,"sampling_params":{"max_new_tokens":8},"bootstrap_host":"127.0.0.1","bootstrap_port":8998,"bootstrap_room":7}`,
		longPrompt("sgl", 400))
	if g := prefill.generate(body); g.MetaInfo.CompletionTokens != 1 {
		t.Errorf("prefill worker generated %d tokens, want 1", g.MetaInfo.CompletionTokens)
	}
	if g := decodeW.generate(body); g.MetaInfo.CompletionTokens != 8 {
		t.Errorf("decode worker generated %d tokens, want 8", g.MetaInfo.CompletionTokens)
	}
	if got := decodeW.metric("workersim_kv_transfer_tokens_total"); got != 100 {
		t.Errorf("decode worker transferred %v tokens, want the prompt's 100", got)
	}
	if got := prefill.metric(`workersim_pd_requests_total{phase="prefill"}`); got != 1 {
		t.Errorf("prefill phases counted = %v", got)
	}
}
