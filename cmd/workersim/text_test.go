package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// whole asks w for a whole completion or chat completion and returns its text and usage.
func whole(t *testing.T, w *testWorker, path, body string) (string, usageBody) {
	t.Helper()
	status, _, b := w.post(path, body)
	if status != 200 {
		t.Fatalf("%s answered %d: %s", path, status, b)
	}
	var c struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage usageBody `json:"usage"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Choices[0].Text + c.Choices[0].Message.Content, c.Usage
}

type usageBody struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
}

// TestSeededTextContinuesLikeVLLM: a completion whose prompt is the original prompt followed by
// the text generated so far, and a chat completion that continues its partial assistant message,
// generate exactly the rest of the uninterrupted text, and the prompt grows by the tokens moved
// into it: what the router's resumed streams are checked against.
func TestSeededTextContinuesLikeVLLM(t *testing.T) {
	w := startWorker(t, testConfig())
	full, fu := whole(t, w, pathCompletions, `{"prompt":"tell me a story","max_tokens":12,"seed":7}`)
	if strings.Contains(full, fillerToken) || len(strings.Fields(full)) != 12 {
		t.Fatalf("seeded text %q", full)
	}
	head := full[:5*4] // five tokens of four bytes
	rest, ru := whole(t, w, pathCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":7,"seed":7}`, "tell me a story"+head))
	if head+rest != full || ru.Prompt != fu.Prompt+5 {
		t.Fatalf("continued %q + %q (prompt %d), uninterrupted %q (prompt %d)", head, rest, ru.Prompt, full, fu.Prompt)
	}
	other, _ := whole(t, w, pathCompletions, `{"prompt":"tell me a story","max_tokens":12,"seed":8}`)
	if other == full {
		t.Fatal("another seed drew the same text")
	}

	msgs := `[{"role":"user","content":"hello there"}]`
	chat, cu := whole(t, w, pathChatCompletions, `{"messages":`+msgs+`,"max_tokens":10,"seed":7}`)
	partial := chat[:3*4]
	cont := fmt.Sprintf(`{"messages":[{"role":"user","content":"hello there"},{"role":"assistant","content":%q}],`+
		`"continue_final_message":true,"add_generation_prompt":false,"max_tokens":7,"seed":7}`, partial)
	tail, tu := whole(t, w, pathChatCompletions, cont)
	if partial+tail != chat || tu.Prompt != cu.Prompt+3 {
		t.Fatalf("chat continued %q + %q (prompt %d), uninterrupted %q (prompt %d)", partial, tail, tu.Prompt, chat, cu.Prompt)
	}
}
