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
	want := RenderChat([]Message{{"system", "be brief"}, {"user", "look here"}, {"assistant", ""}, {"user", "a\"bé"}})
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
