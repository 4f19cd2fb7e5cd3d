package proxy

import (
	"errors"
	"testing"
)

func TestParseCompletions(t *testing.T) {
	in, err := parseInference(completions, []byte(`{"model":"m","prompt":"hello","stream":true,"user":"u1"}`))
	if err != nil || in.model != "m" || !in.stream || string(in.text) != "hello" || in.session != "u1" {
		t.Fatalf("got %+v, %v", in, err)
	}
	in, err = parseInference(completions, []byte(`{"model":"m","prompt":["a","b"]}`))
	if err != nil || string(in.text) != "ab" {
		t.Fatalf("array prompt: %q, %v", in.text, err)
	}
}

func TestParseChatRendersRoleAndContent(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}]}`
	in, err := parseInference(chatCompletions, []byte(body))
	if err != nil || string(in.text) != "system\nbe brief\nuser\nhi there\n" {
		t.Fatalf("got %q, %v", in.text, err)
	}
}

func TestParseRefusesBadBodies(t *testing.T) {
	for name, body := range map[string]string{
		"malformed":        `{"model":`,
		"not an object":    `[1,2]`,
		"no model":         `{"prompt":"x"}`,
		"model not string": `{"model":3,"prompt":"x"}`,
		"no prompt":        `{"model":"m"}`,
		"bad stream":       `{"model":"m","prompt":"x","stream":"yes"}`,
		"bad prompt":       `{"model":"m","prompt":{}}`,
	} {
		if _, err := parseInference(completions, []byte(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err = %v, want a bad request", name, err)
		}
	}
	if _, err := parseInference(chatCompletions, []byte(`{"model":"m","messages":"hi"}`)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("messages not an array: %v", err)
	}
}

func FuzzParseInference(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","stream":true}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		ep := completions
		if chat {
			ep = chatCompletions
		}
		in, err := parseInference(ep, body)
		if err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("error %v is not a bad request", err)
		}
		if err == nil && in.model == "" {
			t.Fatal("accepted a body without a model")
		}
	})
}
