package proxy

import (
	"bytes"
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// Anthropic's Messages API speaks its own error shape: what the router
// itself answers on it (a refusal at the door, a body it cannot read, no
// worker, a stream it had to cut) is written as Anthropic's clients read
// errors, {"type":"error","error":{"type","message"}}, with the same
// statuses as on the OpenAI routes. A worker's own answers pass unchanged.

// anthropicPath is where the Messages API lives.
var anthropicPath = []byte("/v1/messages")

// speaksAnthropic reports whether path is one of the Messages API's:
// /v1/messages, count_tokens, and any path under it (whose 404 is then in
// the shape its client reads).
func speaksAnthropic(path []byte) bool {
	rest, ok := bytes.CutPrefix(path, anthropicPath)
	return ok && (len(rest) == 0 || rest[0] == '/')
}

// anthropicErrorType is the type Anthropic's API gives an error of status.
// Its 529 overloaded_error is what the router's 503 means (no worker, the
// bodies it holds at their limit); the status stays 503, which clients
// retry alike and the router's metrics and Retry-After already speak.
func anthropicErrorType(status int) string {
	switch status {
	case fasthttp.StatusBadRequest, fasthttp.StatusRequestHeaderFieldsTooLarge:
		return "invalid_request_error"
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusForbidden:
		return "permission_error"
	case fasthttp.StatusNotFound:
		return "not_found_error"
	case fasthttp.StatusRequestTimeout, fasthttp.StatusGatewayTimeout:
		return "timeout_error"
	case fasthttp.StatusRequestEntityTooLarge:
		return "request_too_large"
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case fasthttp.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// anthropicError is an error in Anthropic's shape.
type anthropicError struct {
	Type  string `json:"type"` // always "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorBody is the router's own error, of status and OpenAI type typ, in
// the shape of the API that path belongs to.
func errorBody(path []byte, status int, typ, msg string) []byte {
	if speaksAnthropic(path) {
		e := anthropicError{Type: "error"}
		e.Error.Type, e.Error.Message = anthropicErrorType(status), msg
		body, _ := json.Marshal(e)
		return body
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
	return body
}

// sseErrorEvent is the event that ends a stream the router had to cut, in
// the shape of path's API: OpenAI's SDKs raise on a data event carrying an
// error, Anthropic's on an event named error (they skip unnamed ones).
func sseErrorEvent(path []byte, err error) []byte {
	status, typ := statusOf(err)
	body := errorBody(path, status, typ, err.Error())
	var out []byte
	if speaksAnthropic(path) {
		out = append(out, "event: error\n"...)
	}
	out = append(append(out, "data: "...), body...)
	return append(out, "\n\n"...)
}
