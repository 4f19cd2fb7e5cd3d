package workload

import (
	"encoding/json"
	"testing"
)

type completionBody struct {
	Model         *string `json:"model"`
	Prompt        string  `json:"prompt"`
	MaxTokens     int     `json:"max_tokens"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func decodeBody(t *testing.T, body []byte) completionBody {
	t.Helper()
	var got completionBody
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %q is not valid JSON: %v", body, err)
	}
	return got
}

func TestOpenAIBodyStreamingAsksForUsage(t *testing.T) {
	body := Request{Model: "m", Prompt: []byte("hello"), MaxTokens: 7}.OpenAIBody(true)
	got := decodeBody(t, body)
	if got.Model == nil || *got.Model != "m" || got.Prompt != "hello" || got.MaxTokens != 7 || !got.Stream {
		t.Fatalf("decoded %s as %+v", body, got)
	}
	if got.StreamOptions == nil || !got.StreamOptions.IncludeUsage {
		t.Fatalf("streaming body %s lacks stream_options.include_usage", body)
	}
}

func TestOpenAIBodyWithoutStreamOrModel(t *testing.T) {
	body := Request{Prompt: []byte("x"), MaxTokens: 1}.OpenAIBody(false)
	got := decodeBody(t, body)
	if got.Model != nil || got.Stream || got.StreamOptions != nil {
		t.Fatalf("non-streaming body without a model is %s", body)
	}
}

func TestOpenAIBodyEscapesPrompts(t *testing.T) {
	for _, prompt := range []string{
		`quote " backslash \ slash /`,
		"newline \n tab \t return \r nul \x00 bell \x07 del \x7f",
		"utf-8 é 日本 😀 <>&",
		"invalid \xff\xfe utf-8 \xe6\x97 cut",
		"\u2028\u2029",
	} {
		body := Request{Model: `a"b`, Prompt: []byte(prompt), MaxTokens: 1}.OpenAIBody(true)
		got := decodeBody(t, body)
		if want := roundTrip(t, prompt); got.Prompt != want {
			t.Fatalf("prompt %q came back as %q, want %q", prompt, got.Prompt, want)
		}
		if *got.Model != `a"b` {
			t.Fatalf("model came back as %q", *got.Model)
		}
	}
}

// roundTrip is what encoding/json makes of s: invalid UTF-8 bytes become U+FFFD.
func roundTrip(t *testing.T, s string) string {
	t.Helper()
	encoded, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := json.Unmarshal(encoded, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func FuzzOpenAIBody(f *testing.F) {
	f.Add([]byte("plain"), "model")
	f.Add([]byte("\x00\"\\\xff\u2028é"), "")
	f.Fuzz(func(t *testing.T, prompt []byte, model string) {
		got := decodeBody(t, Request{Model: model, Prompt: prompt, MaxTokens: 3}.OpenAIBody(true))
		if want := roundTrip(t, string(prompt)); got.Prompt != want {
			t.Fatalf("prompt %q came back as %q, want %q", prompt, got.Prompt, want)
		}
		if model != "" && *got.Model != roundTrip(t, model) {
			t.Fatalf("model %q came back as %q", model, *got.Model)
		}
	})
}

func BenchmarkOpenAIBody(b *testing.B) {
	req := Request{Model: "m", Prompt: PromptFor(TraceRecord{InputLength: 12000, HashIDs: make([]int64, 24)}), MaxTokens: 300}
	b.SetBytes(int64(len(req.Prompt)))
	for b.Loop() {
		req.OpenAIBody(true)
	}
}
