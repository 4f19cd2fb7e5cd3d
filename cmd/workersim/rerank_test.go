package main

import (
	"fmt"
	"net/http"
	"reflect"
	"testing"
)

// rerankResponse is the part of a rerank answer the tests read.
type rerankResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Results []struct {
		Index    int `json:"index"`
		Document *struct {
			Text string `json:"text"`
		} `json:"document"`
		RelevanceScore float64 `json:"relevance_score"`
	} `json:"results"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (w *testWorker) rerank(path, body string) rerankResponse {
	w.t.Helper()
	status, _, b := w.post(path, body)
	if status != http.StatusOK {
		w.t.Fatalf("%s %s: %d %s", path, body, status, b)
	}
	var r rerankResponse
	decodeInto(w.t, b, &r)
	return r
}

func TestRerankSortsDocumentsByRelevance(t *testing.T) {
	w := startWorker(t, testConfig())
	body := `{"model":"sim-model","query":"capital of france",
		"documents":["bananas are yellow",{"text":"paris is the capital of france"},"france"]}`
	r := w.rerank(pathRerankV1, body)
	if r.Model != "sim-model" || len(r.Results) != 3 || r.Results[0].Index != 1 {
		t.Fatalf("results = %+v, want the document sharing the query's words first", r.Results)
	}
	for i, res := range r.Results {
		if res.RelevanceScore < 0 || res.RelevanceScore > 1 || (i > 0 && res.RelevanceScore > r.Results[i-1].RelevanceScore) {
			t.Errorf("result %d has score %v after %+v", i, res.RelevanceScore, r.Results[:i])
		}
	}
	if r.Results[0].Document == nil || r.Results[0].Document.Text != "paris is the capital of france" {
		t.Errorf("first result's document = %+v", r.Results[0].Document)
	}
	// query + "\n" + document per pair: 36, 48 and 24 bytes, 4 bytes a token.
	if want := 9 + 12 + 6; r.Usage.PromptTokens != want {
		t.Errorf("prompt tokens = %d, want %d", r.Usage.PromptTokens, want)
	}
	for _, path := range []string{pathRerank, pathRerankV2} {
		if other := w.rerank(path, body); !reflect.DeepEqual(other.Results, r.Results) {
			t.Errorf("%s ranks otherwise: %+v", path, other.Results)
		}
	}
}

func TestRerankTopNAndReturnDocuments(t *testing.T) {
	w := startWorker(t, testConfig())
	r := w.rerank(pathRerank, `{"query":"q","documents":["a","q","b"],"top_n":1,"return_documents":false}`)
	if len(r.Results) != 1 || r.Results[0].Index != 1 || r.Results[0].Document != nil {
		t.Fatalf("results = %+v, want only the best, without its document", r.Results)
	}
	if r := w.rerank(pathRerank, `{"query":"q","documents":["a"],"top_n":5}`); len(r.Results) != 1 {
		t.Fatalf("top_n over the documents: %+v", r.Results)
	}
	if r := w.rerank(pathRerank, `{"query":"q","documents":[]}`); len(r.Results) != 0 {
		t.Fatalf("no documents: %+v", r.Results)
	}
}

// TestRerankPairsShareTheQueryPrefix: every pair's prompt starts with the query, so the query is
// computed once: the first pair pays for it, the second is admitted after that prefill and finds
// it cached, and a second rerank of the same query finds it cached for every document.
func TestRerankPairsShareTheQueryPrefix(t *testing.T) {
	w := startWorker(t, testConfig())
	query := longPrompt("query", 640) // 160 tokens, 10 blocks
	first := w.rerank(pathRerank, fmt.Sprintf(`{"query":%q,"documents":["one","two"]}`, query))
	second := w.rerank(pathRerank, fmt.Sprintf(`{"query":%q,"documents":["three","four"]}`, query))
	if first.Usage.PromptTokensDetails.CachedTokens != 160 || second.Usage.PromptTokensDetails.CachedTokens != 2*160 {
		t.Fatalf("cached tokens %d then %d; want the query's 160 tokens for the second pair, then for both",
			first.Usage.PromptTokensDetails.CachedTokens, second.Usage.PromptTokensDetails.CachedTokens)
	}
}

func TestRerankRefusesBadRequests(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{"documents":["a"]}`, `{"query":1,"documents":["a"]}`, `{"query":"q"}`,
		`{"query":"q","documents":"a"}`, `{"query":"q","documents":[1]}`, `{"query":"q","documents":[{"title":"a"}]}`,
		`{"query":"q","documents":["a"],"top_n":-1}`, `{"query":"q","documents":["a"],"return_documents":"no"}`} {
		if status, _, b := w.post(pathRerank, body); status != http.StatusBadRequest {
			t.Errorf("%s: status %d, body %s", body, status, b)
		}
	}
}
