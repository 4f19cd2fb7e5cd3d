package adminapi

// ErrorBody is the OpenAI-style body of every refusal:
// {"error": {"message": ..., "type": ..., "code": ...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong: a message for people, a type callers
// branch on ("invalid_request_error", "not_found_error", "conflict_error",
// "timeout_error", "service_unavailable_error", ...), and the HTTP status.
type ErrorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}
