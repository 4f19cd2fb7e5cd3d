// Package anthropicapi is what the router and workersim share of Anthropic's Messages API: where
// it lives, and the shape and types of its errors, {"type":"error","error":{"type","message"}},
// which Anthropic's SDKs read (an error of another shape reaches them without its type).
package anthropicapi

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Path is where the Messages API lives; count_tokens is under it.
const Path = "/v1/messages"

// Serves reports whether path is the Messages API's: Path, or a path under it (whose 404 is then
// in the shape its clients read).
func Serves(path []byte) bool {
	rest, ok := bytes.CutPrefix(path, []byte(Path))
	return ok && (len(rest) == 0 || rest[0] == '/')
}

// ErrorType is the type Anthropic's API gives an error of status. Its 529 overloaded_error is
// what a 503 means here (no worker, a router at its limit); the status stays 503, which the
// clients retry alike.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusRequestHeaderFieldsTooLarge:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// AppendError appends the error of status with message, in Anthropic's shape.
func AppendError(dst []byte, status int, message string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, ErrorType(status)...)
	dst = append(dst, `","message":`...)
	m, _ := json.Marshal(message) // a string always marshals
	dst = append(dst, m...)
	return append(dst, "}}"...)
}
