package wire

import (
	"encoding/json"

	"github.com/kvrouter/kvrouter/internal/anthropicapi"
)

// Anthropic's Messages API speaks its own error shape: what the router
// itself answers on it (a refusal at the door, a body it cannot read, no
// worker, a stream it had to cut) is written as Anthropic's clients read
// errors, {"type":"error","error":{"type","message"}}, with the same
// statuses as on the OpenAI routes (anthropicapi.ErrorType names them). A
// worker's own answers pass unchanged.

// SpeaksAnthropic reports whether path is one of the Messages API's:
// /v1/messages, count_tokens, and any path under it.
func SpeaksAnthropic(path []byte) bool { return anthropicapi.Serves(path) }

// ErrorBody is the router's own error, of status and OpenAI type typ, in
// the shape of the API that path belongs to.
func ErrorBody(path []byte, status int, typ, msg string) []byte {
	if SpeaksAnthropic(path) {
		return anthropicapi.AppendError(nil, status, msg)
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
	return body
}

// ErrorEvent is the event that ends a stream the router had to cut, in
// the shape of path's API: OpenAI's SDKs raise on a data event carrying an
// error, Anthropic's on an event named error (they skip unnamed ones).
func ErrorEvent(path []byte, status int, typ, msg string) []byte {
	body := ErrorBody(path, status, typ, msg)
	var out []byte
	if SpeaksAnthropic(path) {
		out = append(out, "event: error\n"...)
	}
	out = append(append(out, "data: "...), body...)
	return append(out, "\n\n"...)
}
