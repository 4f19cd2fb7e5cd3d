package wire

import "testing"

// The id is read from the answer as JSON: spacing, key order and an id
// nested in another value do not fool it.
func TestTheResponseIDIsReadAsJSON(t *testing.T) {
	for answer, want := range map[string]string{
		`{"id": "resp_a1", "object": "response"}`:                                                                "resp_a1",
		`{"object":"response","output":[{"id":"resp_fake"}],"id":"resp_b2"}`:                                     "resp_b2",
		`{"output":[{"id":"resp_fake"}]}`:                                                                        "",
		`{"note":"\"id\":\"resp_fake\""}`:                                                                        "",
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\" : \"resp_c3\"}}\n\n": "resp_c3",
		`{"id":"resp_../../admin"}`:                                                                              "",
	} {
		if got := ResponseID([]byte(answer)); got != want {
			t.Errorf("responseID(%s) = %q, want %q", answer, got, want)
		}
	}
}
