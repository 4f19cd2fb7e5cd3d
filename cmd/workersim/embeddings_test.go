package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"testing"
)

// embeddingsResponse is the part of an embeddings answer the tests read.
type embeddingsResponse struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Index     int       `json:"index"`
		Object    string    `json:"object"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (w *testWorker) embeddings(body string) embeddingsResponse {
	w.t.Helper()
	status, _, b := w.post(pathEmbeddings, body)
	if status != http.StatusOK {
		w.t.Fatalf("embeddings %s: %d %s", body, status, b)
	}
	var e embeddingsResponse
	decodeInto(w.t, b, &e)
	return e
}

func cosine(a, b []float64) float64 {
	dot := 0.0
	for i := range a {
		dot += a[i] * b[i]
	}
	return dot
}

func TestEmbeddingsAnswerOneDeterministicUnitVectorPerInput(t *testing.T) {
	w := startWorker(t, testConfig())
	e := w.embeddings(`{"model":"sim-model","input":["the cat sat","the cat sat","the cat sat down","dogs bark loudly"]}`)
	if e.Object != "list" || e.Model != "sim-model" || len(e.Data) != 4 {
		t.Fatalf("answer = %+v", e)
	}
	for i, d := range e.Data {
		if d.Index != i || d.Object != "embedding" || len(d.Embedding) != defaultEmbeddingDims {
			t.Fatalf("data[%d] = index %d, object %q, %d dimensions", i, d.Index, d.Object, len(d.Embedding))
		}
		if norm := cosine(d.Embedding, d.Embedding); math.Abs(norm-1) > 1e-5 {
			t.Errorf("data[%d] has norm %v, want a unit vector", i, norm)
		}
	}
	v := func(i int) []float64 { return e.Data[i].Embedding }
	if cosine(v(0), v(1)) < 1-1e-6 {
		t.Error("the same text got two vectors")
	}
	if near, far := cosine(v(0), v(2)), cosine(v(0), v(3)); near <= far {
		t.Errorf("a text sharing words is not closer (%v) than an unrelated one (%v)", near, far)
	}
	again := w.embeddings(`{"input":"the cat sat"}`)
	if cosine(again.Data[0].Embedding, v(0)) < 1-1e-6 {
		t.Error("the same text got another vector in another request")
	}
	if want := 3 + 3 + 4 + 4; e.Usage.PromptTokens != want || e.Usage.TotalTokens != want {
		t.Errorf("usage = %+v, want %d prompt tokens (4 bytes each)", e.Usage, want)
	}
}

func TestEmbeddingsOfTokenIDsCountOneTokenPerID(t *testing.T) {
	w := startWorker(t, testConfig())
	if e := w.embeddings(`{"input":[[1,2,3],[4,5]]}`); len(e.Data) != 2 || e.Usage.PromptTokens != 5 {
		t.Errorf("two id lists: %d vectors, %d prompt tokens; want 2 and 5", len(e.Data), e.Usage.PromptTokens)
	}
	if e := w.embeddings(`{"input":[7,8,9]}`); len(e.Data) != 1 || e.Usage.PromptTokens != 3 {
		t.Errorf("one id list: %d vectors, %d prompt tokens; want 1 and 3", len(e.Data), e.Usage.PromptTokens)
	}
}

func TestEmbeddingsBase64IsTheFloatVectorEncoded(t *testing.T) {
	w := startWorker(t, testConfig())
	floats := w.embeddings(`{"input":"hello there","dimensions":8}`)
	_, _, b := w.post(pathEmbeddings, `{"input":"hello there","dimensions":8,"encoding_format":"base64"}`)
	var encoded struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	decodeInto(t, b, &encoded)
	raw, err := base64.StdEncoding.DecodeString(encoded.Data[0].Embedding)
	if err != nil || len(raw) != 8*4 {
		t.Fatalf("base64 embedding %q: %v", encoded.Data[0].Embedding, err)
	}
	for i, want := range floats.Data[0].Embedding {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != float32(want) {
			t.Errorf("coordinate %d: base64 %v, float %v", i, got, want)
		}
	}
}

// TestEmbeddingsArePrefillsOnTheEngine: an input is prefilled like a prompt, so sending it again
// finds it in the prefix cache, and it generates nothing.
func TestEmbeddingsArePrefillsOnTheEngine(t *testing.T) {
	w := startWorker(t, testConfig())
	body := fmt.Sprintf(`{"input":%q}`, longPrompt("embed", 4000))
	first, second := w.embeddings(body), w.embeddings(body)
	if first.Usage.PromptTokensDetails.CachedTokens != 0 || second.Usage.PromptTokensDetails.CachedTokens < 1000-16 {
		t.Fatalf("cached tokens %d then %d of 1000", first.Usage.PromptTokensDetails.CachedTokens,
			second.Usage.PromptTokensDetails.CachedTokens)
	}
	if got := w.metric("workersim_prefill_computed_tokens_total"); got > 1000+16 {
		t.Errorf("the engine computed %v prompt tokens for a 1000-token input sent twice", got)
	}
	if got := w.metric(`vllm:generation_tokens_total{model_name="sim-model"}`); got != 0 {
		t.Errorf("embeddings counted %v generated tokens", got)
	}
	if got := w.metric(`vllm:prompt_tokens_total{model_name="sim-model"}`); got != 2000 {
		t.Errorf("prompt tokens counted = %v, want 2000", got)
	}
}

func TestEmbeddingsRefuseWhatVLLMRefuses(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{}`, `{"input":""}`, `{"input":[]}`, `{"input":5}`, `{"input":[1,"a"]}`,
		`{"input":["a",2]}`, `{"input":[-1]}`, `{"input":[1.5]}`, `{"input":"a","encoding_format":"hex"}`,
		`{"input":"a","dimensions":0}`, `{"input":"a","dimensions":65}`, `[]`} {
		if status, _, b := w.post(pathEmbeddings, body); status != http.StatusBadRequest {
			t.Errorf("%s: status %d, body %s", body, status, b)
		}
	}
	if status, _, _ := w.post(pathEmbeddings, `{"model":"other","input":"a"}`); status != http.StatusNotFound {
		t.Errorf("unknown model: status %d", status)
	}
	if e := w.embeddings(`{"messages":[{"role":"user","content":"hello"}]}`); len(e.Data) != 1 || e.Usage.PromptTokens != 3 {
		t.Errorf("chat-form input: %+v", e)
	}
}
