package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/sim"
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
	Details    struct {
		Cached int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
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

// TestAContinuationFindsTheGeneratedTextCached: the engine caches the blocks of the prompt
// followed by the text it generated, as vLLM caches decode blocks, so a continuation's prefill
// is a cache hit past the original prompt: what a resumed stream costs the engine.
func TestAContinuationFindsTheGeneratedTextCached(t *testing.T) {
	w := startWorker(t, testConfig())
	cfg := sim.DefaultConfig()
	prompt := strings.Repeat("abcd", 4*cfg.BlockTokens) // four full blocks
	full, _ := whole(t, w, pathCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":40,"seed":7}`, prompt))
	head := full[:36*cfg.BytesPerToken]
	_, cu := whole(t, w, pathCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":4,"seed":7}`, prompt+head))
	// 4 prompt blocks and 39 tokens of output with KV: 6 full blocks; the continuation's 100
	// tokens may find all 6 (its last token is computed anyway).
	if want := 6 * cfg.BlockTokens; cu.Details.Cached != want {
		t.Fatalf("continuation found %d tokens cached, want %d (the prompt's alone: %d)", cu.Details.Cached, want, 4*cfg.BlockTokens)
	}

	msgs := `[{"role":"user","content":"` + strings.Repeat("hello ", 30) + `"}]`
	chat, ou := whole(t, w, pathChatCompletions, `{"messages":`+msgs+`,"max_tokens":40,"seed":7}`)
	partial := chat[:36*cfg.BytesPerToken]
	cont := fmt.Sprintf(`{"messages":[{"role":"user","content":%q},{"role":"assistant","content":%q}],`+
		`"continue_final_message":true,"add_generation_prompt":false,"max_tokens":4,"seed":7}`, strings.Repeat("hello ", 30), partial)
	_, tu := whole(t, w, pathChatCompletions, cont)
	if promptBlocks := ou.Prompt / cfg.BlockTokens * cfg.BlockTokens; tu.Details.Cached <= promptBlocks {
		t.Fatalf("chat continuation found %d tokens cached, no more than the original prompt's %d", tu.Details.Cached, promptBlocks)
	}
}
