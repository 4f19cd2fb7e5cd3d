package sim

import (
	"errors"
	"testing"

	"github.com/valyala/fastjson"
)

func TestRenderChatJoinsRoleAndContentPerMessage(t *testing.T) {
	got := RenderChat([]Message{{"system", "be brief"}, {"user", "héllo"}})
	if want := "system\nbe brief\nuser\nhéllo\n"; string(got) != want {
		t.Fatalf("RenderChat = %q, want %q", got, want)
	}
}

func TestAppendChatJSONMatchesRenderChat(t *testing.T) {
	body := `[{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"look "},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"here"}]},
		{"role":"assistant","content":null},
		{"role":"user","content":"a\"b\u00e9"}]`
	got, err := AppendChatJSON(nil, fastjson.MustParse(body))
	if err != nil {
		t.Fatal(err)
	}
	image := string(AppendMedia(nil, "image", []byte("x")))
	want := RenderChat([]Message{{"system", "be brief"}, {"user", "look " + image + "here"}, {"assistant", ""}, {"user", "a\"bé"}})
	if string(got) != string(want) {
		t.Fatalf("AppendChatJSON = %q, want %q", got, want)
	}
}

func TestAppendPromptJSON(t *testing.T) {
	for body, want := range map[string]string{
		`"once upon"`:       "once upon",
		`["once ", "upon"]`: "once upon",
		`[]`:                "",
		`"\u00e9t\u00e9"`:   "été",
		`["a", "", "b\n"]`:  "ab\n",
	} {
		got, err := AppendPromptJSON([]byte("x"), fastjson.MustParse(body))
		if err != nil || string(got) != "x"+want {
			t.Errorf("AppendPromptJSON(%s) = %q, %v; want %q", body, got, err, "x"+want)
		}
	}
}

func TestRenderRefusesWrongShapes(t *testing.T) {
	prompts := []string{`1`, `{"a":1}`, `[1,2]`, `null`}
	for _, body := range prompts {
		if _, err := AppendPromptJSON(nil, fastjson.MustParse(body)); !errors.Is(err, ErrRender) {
			t.Errorf("prompt %s: err = %v, want ErrRender", body, err)
		}
	}
	chats := []string{`"hi"`, `[1]`, `[{"role":"user","content":5}]`, `{}`}
	for _, body := range chats {
		if _, err := AppendChatJSON(nil, fastjson.MustParse(body)); !errors.Is(err, ErrRender) {
			t.Errorf("messages %s: err = %v, want ErrRender", body, err)
		}
	}
	if _, err := AppendPromptJSON(nil, nil); !errors.Is(err, ErrRender) {
		t.Errorf("missing prompt: err = %v", err)
	}
}

// An agent's requests render their tools first, as JSON compacted, then the messages with their
// calls and results, on chat completions and Anthropic's Messages API alike.
func TestAnAgentsRequestsRenderToolsThenCallsAndResults(t *testing.T) {
	for _, c := range []struct {
		name   string
		render func([]byte, *fastjson.Value) ([]byte, error)
		req    string
		want   string
	}{
		{"chat", AppendChatRequestJSON, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",` +
			`"function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],` +
			`"tools":[{"type": "function", "function": {"name": "read"}}]}`,
			"tools\n{\"type\":\"function\",\"function\":{\"name\":\"read\"}}\n" +
				"assistant\n<tool_call:read>{\"path\":\"a\"}</tool_call>\ntool\nok\n"},
		{"messages", AppendMessagesJSON, `{"system":[{"type":"text","text":"x-anthropic-billing-header: h"},{"type":"text","text":"Be brief."}],` +
			`"tools":[{"name":"read","input_schema":{}}],"messages":[{"role":"user","content":"Read a."},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t1","name":"read","input":{"path": "a"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}]}]}]}`,
			"tools\n{\"name\":\"read\",\"input_schema\":{}}\nsystem\nBe brief.\nuser\nRead a.\n" +
				"assistant\n<tool_call:read>{\"path\":\"a\"}</tool_call>\nuser\n<tool_result>ok</tool_result>\n"},
	} {
		got, err := c.render(nil, fastjson.MustParse(c.req))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestAppendMessagesJSONRefusesAnOrphanToolResult(t *testing.T) {
	req := fastjson.MustParse(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`)
	if _, err := AppendMessagesJSON(nil, req); !errors.Is(err, ErrRender) {
		t.Fatalf("err = %v, want ErrRender", err)
	}
}
