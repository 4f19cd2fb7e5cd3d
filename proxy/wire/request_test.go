package wire

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
)

func TestParseCompletions(t *testing.T) {
	in, err := Parse(Completions, []byte(`{"model":"m","prompt":"hello","stream":true,"user":"u1"}`), nil)
	if err != nil || in.Model != "m" || !in.Stream || textOf(in) != "hello" || in.Session != "u1" {
		t.Fatalf("got %+v, %v", in, err)
	}
	in, err = Parse(Completions, []byte(`{"model":"m","prompt":["a","b"]}`), nil)
	if err != nil || textOf(in) != "ab" {
		t.Fatalf("array prompt: %q, %v", textOf(in), err)
	}
}

func TestParseChatRendersRoleAndContent(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}]}`
	in, err := Parse(ChatCompletions, []byte(body), nil)
	if err != nil || textOf(in) != "system\nbe brief\nuser\nhi there\n" {
		t.Fatalf("got %q, %v", textOf(in), err)
	}
}

func TestParseRefusesBadBodies(t *testing.T) {
	for name, body := range map[string]string{
		"malformed":        `{"model":`,
		"not an object":    `[1,2]`,
		"no model":         `{"prompt":"x"}`,
		"model not string": `{"model":3,"prompt":"x"}`,
		"no prompt":        `{"model":"m"}`,
		"bad stream":       `{"model":"m","prompt":"x","stream":"yes"}`,
		"bad prompt":       `{"model":"m","prompt":{}}`,
	} {
		if _, err := Parse(Completions, []byte(body), nil); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err = %v, want a bad request", name, err)
		}
	}
	if _, err := Parse(ChatCompletions, []byte(`{"model":"m","messages":"hi"}`), nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("messages not an array: %v", err)
	}
}

func FuzzParseInference(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"hello","stream":true}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		ep := Completions
		if chat {
			ep = ChatCompletions
		}
		in, err := Parse(ep, body, nil)
		if err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("error %v is not a bad request", err)
		}
		if err == nil && in.Model == "" {
			t.Fatal("accepted a body without a model")
		}
	})
}

// agree checks that the one-pass reading of body says what the document
// tree says: both refuse it, or both read the same fields.
func agree(t *testing.T, ep *Endpoint, body []byte) {
	t.Helper()
	got, gerr := Parse(ep, body, nil)
	want, werr := parseInferenceTree(ep, body)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%.300q: scan err %.300v, tree err %.300v", body, gerr, werr)
	}
	if gerr != nil {
		if !errors.Is(gerr, ErrBadRequest) {
			t.Fatalf("%q: %v is not a bad request", body, gerr)
		}
		return
	}
	if got.Model != want.Model || got.Stream != want.Stream || got.Session != want.Session || textOf(got) != textOf(want) {
		t.Fatalf("%q:\nscan %+v %q\ntree %+v %q", body, got, textOf(got), want, textOf(want))
	}
}

var agreeBodies = []string{
	`{"model":"m","prompt":"hello","stream":true,"user":"u1"}`,
	` {"model" : "m" , "prompt" : [ "a" , 1, [2, 3], {"k": "v w"}, null, true, -1.5e3 ] } `,
	`{"model":"m\u0041","prompt":"x\ny\"z\\\/\b\f\r\t\u00e9\ud83d\ude00\ud83d\u0041\u12\q"}`,
	`{"model":"m","session_id":"","user":"u","prompt":"p"}`,
	`{"model":"m","session_id":5,"user":"u","prompt":"p"}`,
	`{"model":null,"prompt":"p"}`,
	`{"model":"m","prompt":"p","stream":null}`,
	`{"model":"m","prompt":"p","m\u006fdel":"n"}`,
	`{"model":"m","prompt":"p","x":NaN,"y":-Inf,"z":nan,"w":+1,"v":01.2.3,"u":-}`,
	`{"model":"m","prompt":"p","x":-`,
	`{"model":"m","prompt":"p",}`,
	`{"model":"m","prompt":"p"} x`,
	`{"model":"m","prompt":"p"`,
	`{"model":"m","prompt":"p\`,
	`[1,]`,
	`"just a string"`,
	``,
	`{"model":"m","messages":[{"content":"after","role":"user"},{"role":"system"},{"role":7,"content":7}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},"b",{"text":1},{"text":"c","text":"d"}]}]}`,
	`{"model":"m","messages":[{"role":"user","role":"system","content":"x"}]}`,
	`{"model":"m","messages":[1]}`,
	`{"model":"m","messages":{}}`,
	`{"model":"m","messages":null}`,
	`{"model":"m","prompt":{}}`,
	`{"model":"m","prompt":null}`,
	`{"model":"m","messages":[]}`,
	`{"model":"m","prompt":[]}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18,"model":"m","prompt":"p"}`,
}

func TestParseAgreesWithTheDocumentTree(t *testing.T) {
	deep := `{"model":"m","prompt":"p","x":` + strings.Repeat("[", 299) + strings.Repeat("]", 299) + `}`
	tooDeep := `{"model":"m","prompt":"p","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`
	for _, body := range append(agreeBodies, deep, tooDeep) {
		for _, ep := range []*Endpoint{Completions, ChatCompletions} {
			agree(t, ep, []byte(body))
		}
	}
}

func FuzzParseAgreesWithTheDocumentTree(f *testing.F) {
	for _, b := range agreeBodies {
		f.Add([]byte(b), false)
		f.Add([]byte(b), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		ep := Completions
		if chat {
			ep = ChatCompletions
		}
		agree(t, ep, body)
	})
}

// textOf is the routing text of in, in one piece.
func textOf(in Inference) string { return string(in.Text.AppendTo(nil)) }

// TestParseAgreesOnLongStrings: long strings, with and without escapes, in
// every place the routing text reads one (a message's content and its text
// parts, a prompt and its array), come out as the document tree renders
// them, whether left in the body or rendered.
func TestParseAgreesOnLongStrings(t *testing.T) {
	plain := strings.Repeat("You are a careful assistant. ", 80) // 2,320 bytes, no escape
	escaped := plain + `\n\"quoted\" \u00e9` + plain
	short := "be brief"
	for _, s := range []string{plain, escaped, short, plain[:minLeftInBody], plain[:minLeftInBody-1]} {
		agree(t, ChatCompletions, []byte(`{"model":"m","messages":[{"role":"system","content":"`+s+`"},`+
			`{"role":"user","content":[{"type":"text","text":"`+s+`"},{"type":"text","text":"`+plain+`"}]},`+
			`{"role":"assistant","content":"`+short+`"}]}`))
		agree(t, Completions, []byte(`{"model":"m","prompt":"`+s+`"}`))
		agree(t, Completions, []byte(`{"model":"m","prompt":["`+s+`",1,"`+plain+`"]}`))
	}
}

// TestALongStringStaysInTheBody: the content of a long message is not
// copied into the rendered text, and the routing text's hashes are those of
// the text rendered whole.
func TestALongStringStaysInTheBody(t *testing.T) {
	content := strings.Repeat("You are a careful assistant. ", 2300) // about 64 KiB
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + content + `"},` +
		`{"role":"user","content":"Summarise the conversation so far."}]}`)
	into := new(RoutingText)
	in, err := Parse(ChatCompletions, body, into)
	if err != nil {
		t.Fatal(err)
	}
	if len(into.rendered) > 100 {
		t.Errorf("%d bytes rendered for a text of %d: the long content was copied", len(into.rendered), in.Text.Len())
	}
	whole := "system\n" + content + "\nuser\nSummarise the conversation so far.\n"
	if textOf(in) != whole {
		t.Fatal("the pieces do not make the rendered text")
	}
	r := affinity.NewRouter(affinity.LeastLoad{}, affinity.NewLoadTable(nil), nil, affinity.DefaultBlockSize, nil)
	got, want := r.PrepareText("m", in.Text, 0), r.Prepare("m", []byte(whole), 0)
	if !slices.Equal(got.Hashes, want.Hashes) || got.Full != want.Full || got.Tail != want.Tail || got.Len() != want.Len() {
		t.Fatalf("hashes of the pieces differ from those of the whole text: %d/%d hashes, tail %x/%x", len(got.Hashes), len(want.Hashes), got.Tail, want.Tail)
	}
}
