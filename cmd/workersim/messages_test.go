package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// anthropicMessage is a Messages API answer.
type anthropicMessage struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage struct {
		InputTokens          int `json:"input_tokens"`
		CacheReadInputTokens int `json:"cache_read_input_tokens"`
		OutputTokens         int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// number posts body to path, which must answer 200, and reads the integer field of the answer.
func (w *testWorker) number(path, body, field string) int {
	w.t.Helper()
	status, _, b := w.post(path, body)
	var answer map[string]json.RawMessage
	decodeInto(w.t, b, &answer)
	n, err := strconv.Atoi(string(answer[field]))
	if status != http.StatusOK || err != nil {
		w.t.Fatalf("%s: %d %s", path, status, b)
	}
	return n
}

func (w *testWorker) message(body string) (int, anthropicMessage) {
	w.t.Helper()
	status, _, b := w.post(pathMessages, body)
	var m anthropicMessage
	decodeInto(w.t, b, &m)
	return status, m
}

// agentBody is an agent's turn with tools: a task, then turns rounds of a call and its result.
func agentBody(turns int, extra string) string {
	msgs := []string{`{"role":"user","content":"` + longPrompt("task", 3000) + `"}`}
	for t := range turns {
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","name":"read","input":{"path":"f%d"}}]}`, t, t),
			fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":%q}]}`, t, longPrompt("result", 1000)))
	}
	return `{"model":"sim-model","max_tokens":3,"system":"Be brief.","tools":[{"name":"read","input_schema":{"type":"object"}},` +
		`{"name":"write","input_schema":{"type":"object"}}],"messages":[` + strings.Join(msgs, ",") + `]` + extra + `}`
}

func TestMessagesAnswerATextMessageWithAnthropicsUsage(t *testing.T) {
	w := startWorker(t, testConfig())
	status, m := w.message(`{"model":"sim-model","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || m.Model != "sim-model" ||
		len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != " tok tok tok" || m.StopReason != "max_tokens" ||
		m.Usage.OutputTokens != 3 || m.Usage.InputTokens == 0 {
		t.Fatalf("%d %+v", status, m)
	}
}

// An agent's next turn finds its whole conversation so far in the prefix cache: tools, system,
// the task and the earlier calls and results. Anthropic's accounting: input_tokens are the rest.
func TestAnAgentsNextTurnReadsItsPrefixFromTheCache(t *testing.T) {
	w := startWorker(t, testConfig())
	_, first := w.message(agentBody(2, ""))
	_, next := w.message(agentBody(3, ""))
	count := w.number(pathCountTokens, agentBody(3, ""), "input_tokens")
	if first.Usage.CacheReadInputTokens != 0 || next.Usage.CacheReadInputTokens < first.Usage.InputTokens-16 ||
		next.Usage.InputTokens+next.Usage.CacheReadInputTokens != count {
		t.Fatalf("first turn %+v, next %+v, the next turn's prompt %d tokens", first.Usage, next.Usage, count)
	}
	if hits := w.metric(`vllm:prefix_cache_hits_total{model_name="sim-model"}`); int(hits) != next.Usage.CacheReadInputTokens {
		t.Fatalf("prefix cache hits %v, the answer says %d", hits, next.Usage.CacheReadInputTokens)
	}
}

// With tools the simulated model calls one, until the last message brings the tool's result:
// then it answers in text, as an agent's model does.
func TestMessagesCallAToolUntilTheResultComesBack(t *testing.T) {
	w := startWorker(t, testConfig())
	ask := `{"model":"sim-model","max_tokens":2,"tools":[{"name":"read","input_schema":{}}],"messages":[{"role":"user","content":"read f"}]}`
	_, m := w.message(ask)
	if m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != "read" ||
		string(m.Content[0].Input) != `{"input":" tok tok"}` || !strings.HasPrefix(m.Content[0].ID, "toolu_") {
		t.Fatalf("with tools: %+v", m)
	}
	if _, m := w.message(agentBody(1, "")); m.StopReason != "max_tokens" || m.Content[0].Type != "text" {
		t.Fatalf("after the tool's result: %+v", m)
	}
	if _, m := w.message(agentBody(1, `,"tool_choice":{"type":"tool","name":"write"}`)); m.Content[0].Name != "write" {
		t.Fatalf("the tool tool_choice names: %+v", m)
	}
	if _, m := w.message(strings.Replace(ask, `"messages"`, `"tool_choice":{"type":"none"},"messages"`, 1)); m.Content[0].Type != "text" {
		t.Fatalf("tool_choice none: %+v", m)
	}
}

func TestMessagesStreamAnthropicsEventsInOrder(t *testing.T) {
	for _, c := range []struct {
		name, tools, delta, joined string
	}{
		{"text", "", "text_delta", " tok tok tok"},
		{"a tool call", `,"tools":[{"name":"read","input_schema":{}}]`, "input_json_delta", `{"input":" tok tok tok"}`},
	} {
		w := startWorker(t, testConfig())
		resp, err := w.client.Post(w.url+pathMessages, "application/json", strings.NewReader(
			`{"model":"sim-model","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]`+c.tools+`}`))
		if err != nil {
			t.Fatal(err)
		}
		events := namedEvents(t, bufio.NewReader(resp.Body))
		resp.Body.Close()
		want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta"
		if c.tools != "" {
			want += " content_block_delta"
		}
		want += " content_block_stop message_delta message_stop"
		var names []string
		var joined strings.Builder
		for _, ev := range events {
			names = append(names, ev.name)
			if ev.data["type"] != ev.name {
				t.Fatalf("%s: event %s carries %v", c.name, ev.name, ev.data)
			}
			delta, _ := ev.data["delta"].(map[string]any)
			if ev.name == "content_block_delta" {
				if delta["type"] != c.delta {
					t.Fatalf("%s: delta %v", c.name, delta)
				}
				text, _ := delta["text"].(string)
				partial, _ := delta["partial_json"].(string)
				joined.WriteString(text + partial)
			}
			if usage, _ := ev.data["usage"].(map[string]any); ev.name == "message_delta" && usage["output_tokens"] != 3.0 {
				t.Fatalf("%s: message_delta %v", c.name, ev.data)
			}
		}
		if strings.Join(names, " ") != want {
			t.Fatalf("%s: events %q, want %q", c.name, names, want)
		}
		if joined.String() != c.joined {
			t.Fatalf("%s: the deltas make %q, want %q", c.name, joined.String(), c.joined)
		}
	}
}

func TestMessagesErrorsAreInAnthropicsShape(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, c := range []struct {
		name, path, body string
		status           int
		typ              string
	}{
		{"no max_tokens", pathMessages, `{"model":"sim-model","messages":[]}`, 400, "invalid_request_error"},
		{"malformed", pathMessages, `{"model":`, 400, "invalid_request_error"},
		{"an orphan tool_result", pathMessages, `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`, 400, "invalid_request_error"},
		{"an unknown model", pathMessages, `{"model":"other","max_tokens":1,"messages":[]}`, 404, "not_found_error"},
		{"count_tokens of an unknown model", pathCountTokens, `{"model":"other","messages":[]}`, 404, "not_found_error"},
		{"no route", pathMessages + "/batches", `{}`, 404, "not_found_error"},
	} {
		status, _, b := w.post(c.path, c.body)
		var m anthropicMessage
		if json.Unmarshal(b, &m) != nil || status != c.status || m.Type != "error" || m.Error == nil || m.Error.Type != c.typ {
			t.Errorf("%s: %d %s", c.name, status, b)
		}
	}
	setFault(t, w, `{"mode":"errors","rate":1}`)
	if status, m := w.message(`{"max_tokens":1,"messages":[]}`); status != http.StatusInternalServerError || m.Error == nil || m.Error.Type != "api_error" {
		t.Fatalf("the errors fault: %d %+v", status, m)
	}
	// The OpenAI routes keep theirs.
	if _, _, b := w.post(pathChatCompletions, `{"model":`); !strings.Contains(string(b), `"error":{"message"`) {
		t.Fatalf("chat's error: %s", b)
	}
}

func TestCountTokensCountsThePromptAndGeneratesNothing(t *testing.T) {
	w := startWorker(t, testConfig())
	short := w.number(pathCountTokens, `{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`, "input_tokens")
	long := w.number(pathCountTokens, agentBody(2, ""), "input_tokens")
	if short <= 0 || long <= short {
		t.Fatalf("counts %d and %d", short, long)
	}
	if _, m := w.message(strings.Replace(agentBody(2, ""), `"max_tokens":3`, `"max_tokens":1`, 1)); m.Usage.InputTokens+m.Usage.CacheReadInputTokens != long {
		t.Fatalf("the count %d, the generation's prompt %+v", long, m.Usage)
	}
	if n := w.metric(`vllm:request_success_total{finished_reason="length",model_name="sim-model"}`); n != 1 {
		t.Fatalf("%v generations, want the one", n)
	}
}

// With tools, a chat's prompt starts with them, as the chat template renders them: two agents
// with other tools do not share their first block.
func TestAChatsToolsComeFirstInItsPrompt(t *testing.T) {
	w := startWorker(t, testConfig())
	body := func(tool string) string {
		return fmt.Sprintf(`{"max_tokens":1,"tools":[{"type":"function","function":{"name":%q}}],"messages":[{"role":"user","content":%q}]}`,
			tool, longPrompt("shared", 3000))
	}
	w.post(pathChatCompletions, body("read"))
	_, _, b := w.post(pathChatCompletions, body("search"))
	if c := decode(t, b); c.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("another agent's tools: %d tokens cached", c.Usage.PromptTokensDetails.CachedTokens)
	}
	_, _, b = w.post(pathChatCompletions, body("read"))
	if c := decode(t, b); c.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("the same agent again found nothing cached")
	}
}

// The prefill phase of vLLM's disaggregation answers a Messages API request as it answers a
// chat: one token, and where the decode worker fetches the prompt's KV.
func TestAMessagesPrefillAnswersItsTransferParameters(t *testing.T) {
	w := startWorker(t, testConfig())
	status, _, b := w.post(pathMessages, `{"model":"sim-model","max_tokens":1,"stream":false,"messages":[{"role":"user","content":"hi"}],`+
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`)
	var m struct {
		KV *struct {
			DoRemotePrefill bool   `json:"do_remote_prefill"`
			EngineID        string `json:"remote_engine_id"`
		} `json:"kv_transfer_params"`
	}
	decodeInto(t, b, &m)
	if status != 200 || m.KV == nil || !m.KV.DoRemotePrefill || m.KV.EngineID == "" {
		t.Fatalf("%d %s", status, b)
	}
}

// vLLM's /tokenize renders a chat's tools into its prompt, as the chat endpoint does.
func TestTokenizeCountsAChatsTools(t *testing.T) {
	w := startWorker(t, testConfig())
	bare := w.number(pathTokenize, `{"messages":[{"role":"user","content":"hi"}]}`, "count")
	if with := w.number(pathTokenize, `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"read"}}]}`,
		"count"); with <= bare {
		t.Fatalf("with a tool %d tokens, without %d", with, bare)
	}
}
