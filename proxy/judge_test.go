package proxy

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/core"
)

// TestUsageOfReadsWhatEachEngineSaysItHadCached: vLLM's usage details,
// SGLang's meta_info, the responses API's input tokens, a stream's last
// chunk, and an answer that does not say.
func TestUsageOfReadsWhatEachEngineSaysItHadCached(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       core.Usage
	}{
		{"vLLM", `{"usage":{"prompt_tokens":120,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":96}}}`,
			core.Usage{PromptTokens: 120, CachedTokens: 96, HasCached: true}},
		{"SGLang", `{"text":"x","meta_info":{"prompt_tokens":64,"completion_tokens":1,"cached_tokens":32}}`,
			core.Usage{PromptTokens: 64, CachedTokens: 32, HasCached: true}},
		{"responses", `{"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":0},"output_tokens":3}}`,
			core.Usage{PromptTokens: 40, HasCached: true}},
		{"the last chunk of a stream", "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"prompt_tokens\": 9,\"prompt_tokens_details\":{\"cached_tokens\": 8}}}\n\ndata: [DONE]\n\n",
			core.Usage{PromptTokens: 9, CachedTokens: 8, HasCached: true}},
		{"Anthropic's accounting, input_tokens the uncached rest", `{"type":"message","usage":{"input_tokens":50,` +
			`"cache_creation_input_tokens":30,"cache_read_input_tokens":120,"output_tokens":9}}`,
			core.Usage{PromptTokens: 200, CachedTokens: 120, HasCached: true}},
		{"vLLM's Messages API, silent about its cache", `{"type":"message","usage":{"input_tokens":80,"output_tokens":9}}`,
			core.Usage{PromptTokens: 80}},
		{"silent about its cache", `{"usage":{"prompt_tokens":7,"completion_tokens":1}}`, core.Usage{PromptTokens: 7}},
		{"no usage", `{"choices":[{"text":"ok"}]}`, core.Usage{}},
	} {
		if got := usageOf([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: usageOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// lastIndex finds what bytes.LastIndex finds, overlapping keys and
// repeated ones included.
func TestLastIndexIsBytesLastIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		s := make([]byte, rng.IntN(64))
		for i := range s {
			s[i] = "ab\""[rng.IntN(3)]
		}
		key := make([]byte, 1+rng.IntN(3))
		for i := range key {
			key[i] = "ab\""[rng.IntN(3)]
		}
		if got, want := lastIndex(s, key), bytes.LastIndex(s, key); got != want {
			t.Fatalf("lastIndex(%q, %q) = %d, bytes.LastIndex says %d", s, key, got, want)
		}
	}
}
