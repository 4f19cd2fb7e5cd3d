package anthropicapi

import (
	"encoding/json"
	"testing"
)

func TestErrorTypesFollowTheStatus(t *testing.T) {
	for status, want := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 408: "timeout_error", 409: "invalid_request_error", 413: "request_too_large",
		429: "rate_limit_error", 431: "invalid_request_error", 418: "invalid_request_error", 500: "api_error", 502: "api_error",
		503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"} {
		if got := ErrorType(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}

func TestAnErrorIsInAnthropicsShape(t *testing.T) {
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	body := AppendError(nil, 429, `too many "requests"`)
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" ||
		e.Error.Message != `too many "requests"` {
		t.Fatalf("%s: %+v, %v", body, e, err)
	}
}

func TestServesTheMessagesAPIAndWhatIsUnderIt(t *testing.T) {
	for path, want := range map[string]bool{"/v1/messages": true, "/v1/messages/count_tokens": true, "/v1/messages/batches/x": true,
		"/v1/messagesx": false, "/v1/chat/completions": false, "/v1/message": false, "": false} {
		if Serves([]byte(path)) != want {
			t.Errorf("%q served: %v", path, !want)
		}
	}
}
