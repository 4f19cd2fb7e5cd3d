package main

import (
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/sim"
)

// responseMeta is what a response object shows besides its status, output and usage.
type responseMeta struct {
	id              string
	created         int64 // created_at, unix seconds
	model           string
	instructions    string
	hasInstructions bool
	maxOutput       int // max_output_tokens, 0 for null
	previousID      string
	metadata        []byte // a JSON object, nil for {}
	store           bool
	background      bool
}

// messageID is the id of the response's output message.
func (m responseMeta) messageID() string {
	return "msg_" + strings.TrimPrefix(m.id, "resp_")
}

// appendResponse appends the response object with status; u, when not nil, is the final usage
// of a completed response and brings its output message.
func appendResponse(dst []byte, m responseMeta, status string, u *sim.Usage) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, m.id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, m.created, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","background":`...)
	dst = strconv.AppendBool(dst, m.background)
	dst = append(dst, `,"error":`...)
	if status == statusFailed {
		dst = append(dst, `{"code":"server_error","message":"the engine stopped before the response completed"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":null,"instructions":`...)
	dst = appendOptionalString(dst, m.instructions, m.hasInstructions)
	dst = append(dst, `,"max_output_tokens":`...)
	if m.maxOutput > 0 {
		dst = strconv.AppendInt(dst, int64(m.maxOutput), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"metadata":`...)
	if m.metadata != nil {
		dst = append(dst, m.metadata...)
	} else {
		dst = append(dst, "{}"...)
	}
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, m.model)
	dst = append(dst, `,"output":[`...)
	if u != nil {
		dst = appendOutputMessage(dst, m.messageID(), statusCompleted, repeatToken(u.Completion))
	}
	dst = append(dst, `],"parallel_tool_calls":true,"previous_response_id":`...)
	dst = appendOptionalString(dst, m.previousID, m.previousID != "")
	dst = append(dst, `,"store":`...)
	dst = strconv.AppendBool(dst, m.store)
	dst = append(dst, `,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],`+
		`"top_p":1.0,"truncation":"disabled","usage":`...)
	dst = appendResponseUsage(dst, u)
	return append(dst, `,"user":null}`...)
}

func appendOptionalString(dst []byte, s string, set bool) []byte {
	if !set {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, s)
}

// appendOutputMessage appends an assistant output message item.
func appendOutputMessage(dst []byte, id, status, text string) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if status == statusCompleted {
		dst = appendOutputText(dst, text)
	}
	return append(dst, "]}"...)
}

// appendOutputText appends an output_text content part.
func appendOutputText(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = appendJSONString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// appendResponseUsage appends the Responses API's usage object, null before completion.
func appendResponseUsage(dst []byte, u *sim.Usage) []byte {
	if u == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Completion), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt+u.Completion), 10)
	return append(dst, '}')
}

// The stream: response.created and response.in_progress, the message item and its text part
// opened, a response.output_text.delta per token, then the text, part and item closed and
// response.completed, every event numbered by sequence_number from 0. Named SSE events
// ("event: TYPE") carry their type in the data too, which is what the SDKs read.

func (r *responsesRenderer) appendToken(dst []byte, u sim.Usage) []byte {
	if u.Completion == 1 {
		dst = r.appendOpening(dst)
	}
	dst = r.openEvent(dst, "response.output_text.delta")
	dst = r.appendTextRef(dst)
	dst = append(dst, `,"delta":"`+fillerToken+`","logprobs":[]`...)
	return closeEvent(dst)
}

func (r *responsesRenderer) appendOpening(dst []byte) []byte {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		dst = r.openEvent(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = appendResponse(dst, r.meta, statusInProgress, nil)
		dst = closeEvent(dst)
	}
	dst = r.openEvent(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":0,"item":`...)
	dst = appendOutputMessage(dst, r.meta.messageID(), statusInProgress, "")
	dst = closeEvent(dst)
	dst = r.openEvent(dst, "response.content_part.added")
	dst = r.appendTextRef(dst)
	dst = append(dst, `,"part":`...)
	dst = appendOutputText(dst, "")
	return closeEvent(dst)
}

func (r *responsesRenderer) appendEnd(dst []byte, final sim.Usage) []byte {
	text := repeatToken(final.Completion)
	dst = r.openEvent(dst, "response.output_text.done")
	dst = r.appendTextRef(dst)
	dst = append(dst, `,"text":`...)
	dst = appendJSONString(dst, text)
	dst = append(dst, `,"logprobs":[]`...)
	dst = closeEvent(dst)
	dst = r.openEvent(dst, "response.content_part.done")
	dst = r.appendTextRef(dst)
	dst = append(dst, `,"part":`...)
	dst = appendOutputText(dst, text)
	dst = closeEvent(dst)
	dst = r.openEvent(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":0,"item":`...)
	dst = appendOutputMessage(dst, r.meta.messageID(), statusCompleted, text)
	dst = closeEvent(dst)
	dst = r.openEvent(dst, "response.completed")
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, r.meta, statusCompleted, &final)
	return closeEvent(dst)
}

// openEvent appends an event's name and the start of its data, up to its sequence number.
func (r *responsesRenderer) openEvent(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(r.seq), 10)
	r.seq++
	return dst
}

func closeEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// appendTextRef appends where a text event belongs: the one message's one text part.
func (r *responsesRenderer) appendTextRef(dst []byte) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = appendJSONString(dst, r.meta.messageID())
	return append(dst, `,"output_index":0,"content_index":0`...)
}

// appendInputItems appends the list object of GET /v1/responses/{id}/input_items: items (this
// response's input) in the given order, at most limit of them after the item named after.
func appendInputItems(dst []byte, r storedResponse, q itemsQuery) []byte {
	ids := make([]string, len(r.input))
	order := make([]int, len(r.input))
	for i := range r.input {
		ids[i] = r.meta.messageID() + "_input_" + strconv.Itoa(i)
		order[i] = i
		if q.descending {
			order[i] = len(r.input) - 1 - i
		}
	}
	start := 0
	for k, i := range order {
		if ids[i] == q.after {
			start = k + 1
		}
	}
	page := order[start:]
	more := len(page) > q.limit
	page = page[:min(len(page), q.limit)]
	dst = append(dst, `{"object":"list","data":[`...)
	for k, i := range page {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = appendInputItem(dst, ids[i], r.input[i])
	}
	dst = append(dst, `],"first_id":`...)
	dst = appendPageEnd(dst, ids, page, 0)
	dst = append(dst, `,"last_id":`...)
	dst = appendPageEnd(dst, ids, page, len(page)-1)
	dst = append(dst, `,"has_more":`...)
	dst = strconv.AppendBool(dst, more)
	return append(dst, '}')
}

func appendPageEnd(dst []byte, ids []string, page []int, k int) []byte {
	if len(page) == 0 {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, ids[page[k]])
}

func appendInputItem(dst []byte, id string, m sim.Message) []byte {
	part := "input_text"
	if m.Role == "assistant" {
		part = "output_text"
	}
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"type":"message","role":`...)
	dst = appendJSONString(dst, m.Role)
	dst = append(dst, `,"status":"completed","content":[{"type":"`...)
	dst = append(dst, part...)
	dst = append(dst, `","text":`...)
	dst = appendJSONString(dst, m.Content)
	return append(dst, "}]}"...)
}
