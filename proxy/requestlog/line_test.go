package requestlog

import "testing"

func TestCompletionTokensAreReadFromEitherAPIsUsage(t *testing.T) {
	for body, want := range map[string]int{
		`{"usage":{"prompt_tokens":3,"completion_tokens":7}}`: 7,
		`{"usage":{"input_tokens":3,"output_tokens": 12}}`:    12,
		`{"usage":{"completion_tokens":null}}`:                0,
		`{"choices":[]}`:                                      0,
	} {
		if got := CompletionTokens([]byte(body)); got != want {
			t.Errorf("%s: %d, want %d", body, got, want)
		}
	}
}
