package main

import (
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
)

// messagesRenderer renders the answers of /v1/messages: one message whose content is the
// generated text, or a call of a tool whose input carries it, and, streamed, Anthropic's
// events (message_start, content_block_start, ping, content_block_delta per token,
// content_block_stop, message_delta, message_stop), each with its event line.
type messagesRenderer struct {
	id, model string
	tool      string // the tool called; "" for a text answer
	maxTokens int
	kv        func(dst []byte, promptTokens int) []byte // appends kv_transfer_params; nil unless a prefill phase
}

var _ streamRenderer = (*messagesRenderer)(nil)

func (r *messagesRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	u := final[0]
	dst = r.appendHead(dst)
	dst = append(dst, `,"content":[`...)
	if r.tool == "" {
		dst = append(dst, `{"type":"text","text":`...)
		dst = appendJSONString(dst, repeatToken(u.Completion))
	} else { // the call's input carries the generated text
		dst = r.appendToolUse(dst, appendJSONString([]byte(`{"input":`), repeatToken(u.Completion)))
		dst = append(dst, '}')
	}
	dst = append(dst, `}],"stop_reason":`...)
	dst = appendJSONString(dst, r.stopReason())
	dst = append(dst, `,"stop_sequence":null,"usage":`...)
	dst = appendMessagesUsage(dst, u)
	if r.kv != nil {
		dst = append(dst, `,"kv_transfer_params":`...)
		dst = r.kv(dst, u.Prompt)
	}
	return append(dst, '}')
}

// appendHead appends a message's fields up to its content, the opening brace included.
func (r *messagesRenderer) appendHead(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, r.id)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	return appendJSONString(dst, r.model)
}

// appendToolUse appends the tool_use block of the call, but its closing brace, with input, a
// JSON object, as its input.
func (r *messagesRenderer) appendToolUse(dst, input []byte) []byte {
	dst = append(dst, `{"type":"tool_use","id":`...)
	dst = appendJSONString(dst, "toolu_"+r.id)
	dst = append(dst, `,"name":`...)
	dst = appendJSONString(dst, r.tool)
	return append(append(dst, `,"input":`...), input...)
}

func (r *messagesRenderer) stopReason() string {
	if r.tool != "" {
		return "tool_use"
	}
	return "max_tokens" // the simulated model always writes max_tokens tokens
}

func (r *messagesRenderer) appendToken(dst []byte, u sim.Usage) []byte {
	if u.Completion == 1 {
		dst = appendEvent(dst, "message_start", func(dst []byte) []byte {
			dst = append(r.appendHead(append(dst, `{"type":"message_start","message":`...)), `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
			return append(appendMessagesUsage(dst, u), "}}"...)
		})
		dst = appendEvent(dst, "content_block_start", func(dst []byte) []byte {
			dst = append(dst, `{"type":"content_block_start","index":0,"content_block":`...)
			if r.tool == "" {
				return append(dst, `{"type":"text","text":""}}`...)
			}
			return append(r.appendToolUse(dst, []byte("{}")), "}}"...)
		})
		dst = appendEvent(dst, "ping", func(dst []byte) []byte { return append(dst, `{"type":"ping"}`...) })
	}
	piece := fillerToken
	if r.tool != "" && u.Completion == 1 {
		piece = `{"input":"` + fillerToken
	}
	return r.appendDelta(dst, piece)
}

// appendDelta appends a content_block_delta carrying piece: text, or a piece of the call's
// input JSON.
func (r *messagesRenderer) appendDelta(dst []byte, piece string) []byte {
	return appendEvent(dst, "content_block_delta", func(dst []byte) []byte {
		if r.tool == "" {
			dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`...)
		} else {
			dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`...)
		}
		return append(appendJSONString(dst, piece), "}}"...)
	})
}

func (r *messagesRenderer) appendEnd(dst []byte, final sim.Usage) []byte {
	if r.tool != "" {
		dst = r.appendDelta(dst, `"}`)
	}
	dst = appendEvent(dst, "content_block_stop", func(dst []byte) []byte {
		return append(dst, `{"type":"content_block_stop","index":0}`...)
	})
	dst = appendEvent(dst, "message_delta", func(dst []byte) []byte {
		dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":`...)
		dst = appendJSONString(dst, r.stopReason())
		dst = append(dst, `,"stop_sequence":null},"usage":`...)
		return append(appendMessagesUsage(dst, final), '}')
	})
	return appendEvent(dst, "message_stop", func(dst []byte) []byte { return append(dst, `{"type":"message_stop"}`...) })
}

// appendEvent appends an SSE event named name whose data data appends.
func appendEvent(dst []byte, name string, data func([]byte) []byte) []byte {
	dst = append(append(append(dst, "event: "...), name...), "\ndata: "...)
	return append(data(dst), "\n\n"...)
}

// appendMessagesUsage appends u in Anthropic's accounting: input_tokens are the prompt's tokens
// the engine computed, cache_read_input_tokens those its prefix cache held.
func appendMessagesUsage(dst []byte, u sim.Usage) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt-u.Cached), 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Completion), 10)
	return append(dst, '}')
}
