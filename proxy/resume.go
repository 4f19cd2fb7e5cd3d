package proxy

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/proxy/wire"
	"github.com/valyala/fastjson"
)

// A stream that its worker cuts after the first byte resumes on another
// worker (migrate.go): the engine is asked to continue the generation, as
// vLLM can, with the text generated so far. This file says which requests
// can resume, and writes the request that continues one.

// resumeKind is how a generation is continued.
type resumeKind int

const (
	// resumeCompletion: /v1/completions, the prompt extended by the text
	// generated so far.
	resumeCompletion resumeKind = iota + 1
	// resumeChat: /v1/chat/completions, the messages followed by the
	// partial assistant message, with vLLM's continue_final_message.
	resumeChat
)

// errCannotResume wraps every reason a stream cannot resume.
var errCannotResume = errors.New("the stream cannot resume")

// resumeKindOf says how x's stream would be continued, or why it cannot be:
// only OpenAI completions and chat completions, streamed, one choice,
// without logprobs, stop sequences (one may straddle the cut), echo,
// suffix or constrained output (the grammar would start over). A
// disaggregated request's continuation goes through a new prefill
// (disaggregation.planResume). Tool-call deltas are refused as they come
// (splice.go).
func resumeKindOf(x *exchange) (resumeKind, error) {
	kind := resumeCompletion
	switch {
	case x.ep == wire.ChatCompletions:
		kind = resumeChat
	case x.ep != wire.Completions:
		return 0, fmt.Errorf("%w: only /v1/completions and /v1/chat/completions resume", errCannotResume)
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(x.body)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errCannotResume, err)
	}
	if err := resumableShape(v, kind); err != nil {
		return 0, err
	}
	return kind, nil
}

// resumableShape refuses the request fields a continuation cannot honour.
func resumableShape(v *fastjson.Value, kind resumeKind) error {
	for _, f := range []struct {
		key string
		ok  func(*fastjson.Value) bool
	}{
		{"n", isOne}, {"best_of", isOne}, {"logprobs", isOff}, {"top_logprobs", isOff}, {"echo", isOff},
		{"suffix", isOff}, {"stop", isEmpty}, {"guided_json", isOff}, {"guided_regex", isOff},
		{"guided_choice", isOff}, {"guided_grammar", isOff}, {"structured_outputs", isOff},
		{"response_format", isPlainText}, {"continue_final_message", isOff},
	} {
		if fv := v.Get(f.key); fv != nil && !f.ok(fv) {
			return fmt.Errorf("%w: its %s", errCannotResume, f.key)
		}
	}
	if prompt := v.Get("prompt"); kind == resumeCompletion && (prompt == nil || prompt.Type() != fastjson.TypeString) {
		return fmt.Errorf("%w: its prompt is not one string", errCannotResume)
	}
	if msgs := v.Get("messages"); kind == resumeChat && (msgs == nil || msgs.Type() != fastjson.TypeArray) {
		return fmt.Errorf("%w: no messages", errCannotResume)
	}
	return nil
}

func isOne(v *fastjson.Value) bool { return v.Type() == fastjson.TypeNull || v.GetInt() == 1 }

// isOff: null, false, zero or empty.
func isOff(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull, fastjson.TypeFalse:
		return true
	case fastjson.TypeNumber:
		return v.GetInt() == 0
	case fastjson.TypeString:
		return len(v.GetStringBytes()) == 0
	}
	return false
}

func isEmpty(v *fastjson.Value) bool {
	return isOff(v) || v.Type() == fastjson.TypeArray && len(v.GetArray()) == 0
}

func isPlainText(v *fastjson.Value) bool {
	return v.Type() == fastjson.TypeNull || string(v.GetStringBytes("type")) == "text"
}

// continuation is the body that asks an engine for the rest of the
// generation x's body asked for, after text, tokens long, was generated.
func continuation(kind resumeKind, body, text []byte, tokens int) ([]byte, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, err
	}
	var a fastjson.Arena
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		if err := reduceLimit(v, &a, key, tokens); err != nil {
			return nil, err
		}
	}
	if f := v.Get("min_tokens"); f != nil && f.Type() == fastjson.TypeNumber {
		v.Set("min_tokens", a.NewNumberInt(max(f.GetInt()-tokens, 0)))
	}
	if kind == resumeCompletion {
		prompt := append(append([]byte(nil), v.GetStringBytes("prompt")...), text...)
		v.Set("prompt", a.NewStringBytes(prompt))
		return v.MarshalTo(nil), nil
	}
	partial := a.NewObject()
	partial.Set("role", a.NewString("assistant"))
	partial.Set("content", a.NewStringBytes(text))
	msgs := v.Get("messages")
	msgs.SetArrayItem(len(msgs.GetArray()), partial)
	v.Set("continue_final_message", a.NewTrue())
	v.Set("add_generation_prompt", a.NewFalse())
	return v.MarshalTo(nil), nil
}

// reduceLimit takes tokens off the token limit key, when the body sets one;
// a limit the generation already reached leaves nothing to resume.
func reduceLimit(v *fastjson.Value, a *fastjson.Arena, key string, tokens int) error {
	f := v.Get(key)
	if f == nil || f.Type() != fastjson.TypeNumber {
		return nil
	}
	left := f.GetInt() - tokens
	if left < 1 {
		return fmt.Errorf("%w: its %s were all generated", errCannotResume, key)
	}
	v.Set(key, a.NewNumberInt(left))
	return nil
}
