package main

import (
	"encoding/json"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
)

// fillerToken is the text of every generated token: deterministic, one word per token.
const fillerToken = " tok"

// responseHead identifies one response in every JSON body or chunk it sends.
type responseHead struct {
	id      string
	created int64 // unix seconds
	model   string
	chat    bool
}

func (h responseHead) object(stream bool) string {
	switch {
	case !h.chat:
		return "text_completion"
	case stream:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

// appendPreamble appends the fields every body starts with, up to and including "choices":.
func (h responseHead) appendPreamble(dst []byte, stream bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, h.id)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, h.object(stream)...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, h.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, h.model)
	return append(dst, `,"choices":`...)
}

// appendCompletion appends a whole non-streaming response; kv, when not nil, is appended as
// kv_transfer_params.
func (h responseHead) appendCompletion(dst []byte, u sim.Usage, kv []byte, text string) []byte {
	dst = h.appendPreamble(dst, false)
	if h.chat {
		dst = append(dst, `[{"index":0,"message":{"role":"assistant","content":`...)
		dst = appendJSONString(dst, text)
		dst = append(dst, `},"logprobs":null,"finish_reason":"length"}]`...)
	} else {
		dst = append(dst, `[{"index":0,"text":`...)
		dst = appendJSONString(dst, text)
		dst = append(dst, `,"logprobs":null,"finish_reason":"length"}]`...)
	}
	dst = appendUsage(dst, u)
	if kv != nil {
		dst = append(dst, `,"kv_transfer_params":`...)
		dst = append(dst, kv...)
	}
	return append(dst, '}')
}

// appendTokenChunk appends one SSE event carrying text, the tokens up to the one numbered n
// (1-based) of maxTokens.
func (h responseHead) appendTokenChunk(dst []byte, n, maxTokens int, text string) []byte {
	dst = append(dst, "data: "...)
	dst = h.appendPreamble(dst, true)
	if h.chat {
		dst = append(dst, `[{"index":0,"delta":{`...)
		if n == 1 {
			dst = append(dst, `"role":"assistant",`...)
		}
		dst = append(dst, `"content":`...)
		dst = appendJSONString(dst, text)
		dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	} else {
		dst = append(dst, `[{"index":0,"text":`...)
		dst = appendJSONString(dst, text)
		dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	}
	if n >= maxTokens {
		dst = append(dst, `"length"`...)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, "}]}\n\n"...)
}

// appendUsageChunk appends the SSE event that reports usage after the last token.
func (h responseHead) appendUsageChunk(dst []byte, u sim.Usage) []byte {
	dst = append(dst, "data: "...)
	dst = h.appendPreamble(dst, true)
	dst = append(dst, "[]"...)
	dst = appendUsage(dst, u)
	return append(dst, "}\n\n"...)
}

const doneEvent = "data: [DONE]\n\n"

// completionRenderer renders the answers of /v1/completions and /v1/chat/completions.
type completionRenderer struct {
	head         responseHead
	maxTokens    int
	includeUsage bool                                      // stream_options.include_usage
	kv           func(dst []byte, promptTokens int) []byte // appends kv_transfer_params; nil unless a prefill phase
	text         *textGen                                  // the generated text
	emitted      int                                       // tokens whose text was sent
}

var _ streamRenderer = (*completionRenderer)(nil)

func (r *completionRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	var kv []byte
	if r.kv != nil {
		kv = r.kv(nil, final[0].Prompt)
	}
	return r.head.appendCompletion(dst, final[0], kv, r.text.take(final[0].Completion))
}

// appendToken appends the chunk of the tokens generated since the last one (one, but when the
// engine's clock jumped).
func (r *completionRenderer) appendToken(dst []byte, u sim.Usage) []byte {
	text := r.text.take(max(u.Completion-r.emitted, 1))
	r.emitted = u.Completion
	return r.head.appendTokenChunk(dst, u.Completion, r.maxTokens, text)
}

func (r *completionRenderer) appendEnd(dst []byte, final sim.Usage) []byte {
	if r.includeUsage {
		dst = r.head.appendUsageChunk(dst, final)
	}
	return append(dst, doneEvent...)
}

func appendUsage(dst []byte, u sim.Usage) []byte {
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Completion), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt+u.Completion), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	return append(dst, "}}"...)
}

// appendErrorBody appends an OpenAI-style error object.
func appendErrorBody(dst []byte, message, typ, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, typ)
	dst = append(dst, `,"code":`...)
	dst = appendJSONString(dst, code)
	return append(dst, "}}"...)
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

func repeatToken(n int) string {
	b := make([]byte, 0, n*len(fillerToken))
	for range n {
		b = append(b, fillerToken...)
	}
	return string(b)
}
