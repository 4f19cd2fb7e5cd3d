package wire

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/agentturns"
	"github.com/kvrouter/kvrouter/sim"
)

// agentTurn is the body of an agent's turn on ep after turns rounds of a
// tool call and its result, with tools as its tools, in the order the
// SDKs write a body (the messages first, the tools and system last).
func agentTurn(ep *Endpoint, tools string, turns int) string {
	if ep == Messages {
		return agentturns.Anthropic(tools, turns)
	}
	return agentturns.Chat(tools, turns)
}

// routingTextOf is the routing text of body on ep, which must parse.
func routingTextOf(t *testing.T, ep *Endpoint, body string) string {
	t.Helper()
	in, err := Parse(ep, []byte(body), nil)
	if err != nil {
		t.Fatalf("%s: %v\n%s", ep.Path, err, body)
	}
	return textOf(in)
}

// firstBlock is the hash of the first block of text, as a replica hashes
// it with the default block size.
func firstBlock(text string) uint64 {
	r := affinity.NewRouter(affinity.LeastLoad{}, affinity.NewLoadTable(nil), nil, affinity.DefaultBlockSize, nil)
	return r.Prepare("m", []byte(text), 0).Hashes[0]
}

func TestTwoTurnsOfOneAgentShareTheirWholePrefix(t *testing.T) {
	for ep, tools := range map[*Endpoint]string{ChatCompletions: agentturns.ChatTools, Messages: agentturns.AnthropicTools} {
		for turn := range 4 {
			this, next := routingTextOf(t, ep, agentTurn(ep, tools, turn)), routingTextOf(t, ep, agentTurn(ep, tools, turn+1))
			if !strings.HasPrefix(next, this) {
				t.Fatalf("%s turn %d is not a prefix of the next:\n%q\n%q", ep.Path, turn, this, next)
			}
		}
		last := routingTextOf(t, ep, agentTurn(ep, tools, 3))
		for _, want := range []string{"tools\n", `"name":"read"`, "<tool_call:read>", "package f2"} {
			if !strings.Contains(last, want) {
				t.Errorf("%s: the routing text lacks %q:\n%s", ep.Path, want, last)
			}
		}
		if i, j := strings.Index(last, "tools\n"), strings.Index(last, "Fix the test."); i != 0 || j < 0 {
			t.Errorf("%s: the tools do not come first:\n%s", ep.Path, last)
		}
	}
}

func TestAgentsWithDifferentToolsDoNotShare(t *testing.T) {
	for ep, tools := range map[*Endpoint][2]string{ChatCompletions: {agentturns.ChatTools, agentturns.OtherChatTools}, Messages: {agentturns.AnthropicTools, agentturns.OtherAnthropicTools}} {
		a, b := routingTextOf(t, ep, agentTurn(ep, tools[0], 3)), routingTextOf(t, ep, agentTurn(ep, tools[1], 3))
		if firstBlock(a) == firstBlock(b) {
			t.Errorf("%s: two agents with other tools share their first block", ep.Path)
		}
		none := routingTextOf(t, ep, agentTurn(ep, "[]", 3))
		if null := routingTextOf(t, ep, agentTurn(ep, "null", 3)); none != null || strings.Contains(none, "tools") {
			t.Errorf("%s: no tools, as [] and as null, render %q and %q", ep.Path, none, null)
		}
	}
}

func TestTheToolsComeFirstWhereverTheBodyNamesThem(t *testing.T) {
	first := `{"tools":` + agentturns.ChatTools + `,"model":"m","messages":[{"role":"user","content":"hi"}]}`
	last := `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":` + agentturns.ChatTools + `}`
	if a, b := routingTextOf(t, ChatCompletions, first), routingTextOf(t, ChatCompletions, last); a != b {
		t.Fatalf("the tools' place in the body changes the text:\n%q\n%q", a, b)
	}
	first = `{"system":"Be brief.","tools":` + agentturns.AnthropicTools + `,"model":"m","messages":[{"role":"user","content":"hi"}]}`
	last = `{"model":"m","messages":[{"role":"user","content":"hi"}],"system":"Be brief.","tools":` + agentturns.AnthropicTools + `}`
	a, b := routingTextOf(t, Messages, first), routingTextOf(t, Messages, last)
	if a != b || !strings.HasPrefix(a, "tools\n") || !strings.Contains(a, "\nsystem\nBe brief.\nuser\nhi\n") {
		t.Fatalf("Anthropic's tools, system, messages:\n%q\n%q", a, b)
	}
}

func TestAnImageByTheSameURLMatchesAnotherDoesNot(t *testing.T) {
	chat := func(url string) string {
		return `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + url +
			`"}},{"type":"text","text":"What is this?"}]}]}`
	}
	anthropic := func(source string) string {
		return `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":` + source +
			`},{"type":"text","text":"What is this?"}]}]}`
	}
	for _, c := range []struct {
		ep             *Endpoint
		same, escaped  string
		other, context string
	}{
		{ChatCompletions, chat("https://example.com/cat.png"), chat(`https:\/\/example.com\/cat.png`), chat("https://example.com/dog.png"), "a URL"},
		{ChatCompletions, chat("data:image/png;base64,iVBORw0KGgo="), chat("data:image/png;base64,iVBORw0KGgo="), chat("data:image/png;base64,R0lGODlh"), "data"},
		{Messages, anthropic(`{"type":"url","url":"https://example.com/cat.png"}`), anthropic(`{"url":"https:\/\/example.com\/cat.png","type":"url"}`),
			anthropic(`{"type":"url","url":"https://example.com/dog.png"}`), "a URL"},
		{Messages, anthropic(`{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}`),
			anthropic(`{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}`),
			anthropic(`{"type":"base64","media_type":"image/png","data":"R0lGODlh"}`), "bytes"},
	} {
		same, escaped, other := routingTextOf(t, c.ep, c.same), routingTextOf(t, c.ep, c.escaped), routingTextOf(t, c.ep, c.other)
		if same != escaped || same == other || !strings.Contains(same, "<image:") || !strings.HasSuffix(same, "What is this?\n") {
			t.Errorf("%s, an image by %s: same %q, escaped %q, other %q", c.ep.Path, c.context, same, escaped, other)
		}
	}
}

func TestAnthropicSystemBlocksRenderLikeAString(t *testing.T) {
	body := func(system string) string {
		return `{"model":"m","system":` + system + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	want := routingTextOf(t, Messages, body(`"You help. Be brief."`))
	for _, system := range []string{
		`[{"type":"text","text":"You help. "},{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}]`,
		// Claude Code's per-request stamp is left out, as vLLM leaves it out of the prompt.
		`[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.0; cch=9f3a1;"},{"type":"text","text":"You help. Be brief."}]`,
	} {
		if got := routingTextOf(t, Messages, body(system)); got != want {
			t.Errorf("system %s: %q, want %q", system, got, want)
		}
	}
	if got := routingTextOf(t, Messages, body(`""`)); got != "user\nhi\n" {
		t.Errorf("an empty system prompt renders %q", got)
	}
}

// Production routers pass block types they do not know to the engine: new
// ones ship all the time. They are left out of the routing text.
func TestUnknownBlockTypesPassButAreNotRouted(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"a pdf"}},` +
		`{"type":"text","text":"Summarise it."}]},{"role":"assistant","content":[{"type":"thinking","thinking":"Hmm.","signature":"x"},` +
		`{"type":"text","text":"It says hi."},{"type":"server_tool_use","id":"s1","name":"web_search","input":{}}]}]}`
	if got, want := routingTextOf(t, Messages, body), "user\nSummarise it.\nassistant\nIt says hi.\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// badMessages are Messages API bodies the router refuses, each with why.
var badMessages = map[string]string{
	"messages not an array":      `{"model":"m","messages":{"role":"user"}}`,
	"message not an object":      `{"model":"m","messages":["hi"]}`,
	"role not a string":          `{"model":"m","messages":[{"role":1,"content":"hi"}]}`,
	"no content":                 `{"model":"m","messages":[{"role":"user"}]}`,
	"content a number":           `{"model":"m","messages":[{"role":"user","content":3}]}`,
	"block not an object":        `{"model":"m","messages":[{"role":"user","content":["hi"]}]}`,
	"block without a type":       `{"model":"m","messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
	"block type not a string":    `{"model":"m","messages":[{"role":"user","content":[{"type":7,"text":"hi"}]}]}`,
	"text block without text":    `{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}`,
	"text block with a number":   `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`,
	"image without a source":     `{"model":"m","messages":[{"role":"user","content":[{"type":"image"}]}]}`,
	"image source without type":  `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"data":"x"}}]}]}`,
	"base64 image without data":  `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]}]}`,
	"url image without its url":  `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","data":"x"}}]}]}`,
	"tool_use without an id":     `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`,
	"tool_use without a name":    `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","input":{}}]}]}`,
	"tool_use input a string":    `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]}]}`,
	"tool_use input an array":    `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[]}]}]}`,
	"tool_result with no use":    `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"42"}]}]}`,
	"tool_result of another use": `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2"}]}]}`,
	"tool_result two turns late": `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"wait"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`,
	"tool_result without an id":  `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","content":"42"}]}]}`,
	"tool_result content a map":  `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":{"a":1}}]}]}`,
	"bad block in a tool_result": `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text"}]}]}]}`,
	"system a number":            `{"model":"m","system":1,"messages":[]}`,
	"system block not text":      `{"model":"m","system":[{"type":"image","source":{}}],"messages":[]}`,
	"tools not an array":         `{"model":"m","tools":{"name":"f"},"messages":[]}`,
	"a tool not an object":       `{"model":"m","tools":["f"],"messages":[]}`,
	"a block's key twice":        `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`,
	"model with a dot segment":   `{"model":"loras/../../etc","messages":[]}`,
	"model with a backslash":     `{"model":"a\\b","messages":[]}`,
	"model with a newline":       `{"model":"a\nb","messages":[]}`,
}

func TestBadMessagesAreRefusedWithA400(t *testing.T) {
	for why, body := range badMessages {
		_, err := Parse(Messages, []byte(body), nil)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", why, err)
		}
	}
}

func TestAHugeToolsListIsRefused(t *testing.T) {
	tools := "[" + strings.TrimSuffix(strings.Repeat(`{"name":"f","input_schema":{}},`, maxTools+1), ",") + "]"
	for _, ep := range []*Endpoint{ChatCompletions, Messages} {
		_, err := Parse(ep, []byte(`{"model":"m","messages":[],"tools":`+tools+`}`), nil)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "tools") {
			t.Errorf("%s: %d tools: %v", ep.Path, maxTools+1, err)
		}
	}
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"name":"f","input_schema":{}},`, maxTools), ",") + "]"
	if _, err := Parse(Messages, []byte(`{"model":"m","messages":[],"tools":`+many+`}`), nil); err != nil {
		t.Errorf("%d tools: %v", maxTools, err)
	}
}

func TestModelNamesThatArePathsAreNamesUnlessTheyClimb(t *testing.T) {
	for model, ok := range map[string]bool{
		"meta-llama/Llama-3.1-8B-Instruct": true, "/models/llama": true, "qwen2:7b": true, "v1.2": true,
		"a/./b": false, "..": false, "loras/..": false, "a\\\\b": false, "a\\u0000b": false,
	} {
		_, err := Parse(ChatCompletions, []byte(`{"model":"`+model+`","messages":[]}`), nil)
		if (err == nil) != ok {
			t.Errorf("model %q: %v", model, err)
		}
	}
}

func TestTheChatRouteStillReadsLeniently(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"assistant","content":[7,{"type":"image_url"},{"text":"a"}],` +
		`"tool_calls":[3,{"function":"x"},{"function":{"name":"f","arguments":7}}]},{"role":"tool","content":"r"}]}`
	if got, want := routingTextOf(t, ChatCompletions, body), "assistant\na<tool_call:f></tool_call>\ntool\nr\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// agreeMessagesBodies are Messages API bodies the one-pass reading and the
// reference reading must agree on.
var agreeMessagesBodies = []string{
	agentturns.Anthropic(agentturns.AnthropicTools, 3),
	agentturns.Anthropic("null", 1),
	`{"model":"m","messages":[{"content":[{"text":"a","type":"text"},{"source":{"data":"x\u00e9","type":"base64"},"type":"image"}],"role":"user"}],"metadata":{"user_id":"u7"}}`,
	`{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t\u0031","name":"f","input":{ "a" : [1, 2] }}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"},{"type":"image","source":{"type":"url","url":"u"}},{"type":"tool_use"}]}]}]}`,
	`{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: x"}],"messages":[{"role":"user","content":[{"type":"mystery"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}},{"type":"image","source":{"type":"new_kind"}}]}]}`,
	`{"model":"m","metadata":{"user_id":"a","user_id":"b"},"messages":[]}`,
	`{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f"},{"type":"tool_use","id":"t2","name":"g","input":null}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"},{"type":"tool_result","tool_use_id":"t2"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"a","url":"b"}}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"x","type":"y"}}]}]}`,
}

// longText is a string the routing text leaves in the body.
var longText = strings.Repeat("All work and no play. ", minLeftInBody/20)

func init() {
	// The Go SDK writes a message's content before its role.
	agreeMessagesBodies = append(agreeMessagesBodies,
		`{"model":"m","messages":[{"content":"`+longText+`","role":"user"},{"content":[{"type":"text","text":"`+longText+
			`"},{"type":"text","text":"short"}],"role":"assist\u0061nt"},{"role":"user","content":"`+longText+`"}]}`,
		`{"model":"m","messages":[{"content":[{"text":"a","type":"text"}],"role":"`+longText+`"}]}`,
		`{"model":"m","messages":[{"content":"a","role":1}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a","role":"user"}]}`,
	)
}

// agreeChatBodies are chat bodies with tools, tool calls and media.
var agreeChatBodies = []string{
	agentTurn(ChatCompletions, agentturns.ChatTools, 3),
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"data:x"},{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}},` +
		`{"type":"file","file":{"file_id":"f1"}},{"type":"file","file":{"file_data":"b64","file_id":"f1"}}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{}"}},{"role":"assistant","tool_calls":[{"function":{"name":"g","name":"h"}}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"a","url":"b"}}]}]}`,
	`{"model":"m","tools":[{"a":1},{"b": [ 1 , 2 ]}],"messages":[]}`,
	`{"model":"m","tools":[1],"messages":[]}`,
}

func TestNewShapesAgreeWithTheDocumentTree(t *testing.T) {
	for _, body := range agreeMessagesBodies {
		agree(t, Messages, []byte(body))
	}
	for body := range badMessages {
		agree(t, Messages, []byte(badMessages[body]))
	}
	for _, body := range agreeChatBodies {
		agree(t, ChatCompletions, []byte(body))
	}
	for _, body := range agreeBodies {
		agree(t, Messages, []byte(body))
	}
}

func FuzzParseMessagesAgreesWithTheDocumentTree(f *testing.F) {
	for _, b := range append(agreeMessagesBodies, agreeChatBodies...) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agree(t, Messages, body)
		agree(t, ChatCompletions, body)
	})
}

// The simulated engine (workersim, fleetsim) renders the prompt of a chat
// request as the router does: it caches what the router hashes.
func TestTheSimulatedEngineCachesWhatTheRouterHashes(t *testing.T) {
	for _, body := range append(agreeChatBodies[:2], agentTurn(ChatCompletions, agentturns.ChatTools, 2), agentTurn(ChatCompletions, "[]", 1)) {
		want, err := sim.AppendChatRequestJSON(nil, fastjson.MustParse(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := routingTextOf(t, ChatCompletions, body); got != string(want) {
			t.Errorf("the router reads %q, the engine renders %q", got, want)
		}
	}
}

func TestPiecesFollowTheSections(t *testing.T) {
	long := strings.Repeat("x", minLeftInBody)
	body := `{"model":"m","messages":[{"role":"user","content":"` + long + `"}],"system":"` + long + `","tools":[{"name":"f"}]}`
	in, err := Parse(Messages, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "tools\n{\"name\":\"f\"}\nsystem\n" + long + "\nuser\n" + long + "\n"
	if textOf(in) != want || !slices.ContainsFunc(in.Text, func(p []byte) bool { return len(p) == minLeftInBody }) {
		t.Fatalf("%d pieces make %q", len(in.Text), textOf(in))
	}
}

// A body of thousands of calls and as many results is read in n log n: its
// results are looked up in an index of the calls' digests, which still
// tells a result that answers no call.
func TestManyToolResultsAreMatchedToTheirCalls(t *testing.T) {
	const n = 5000
	var uses, results []string
	for i := range n {
		uses = append(uses, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"f","input":{}}`, i))
		results = append(results, fmt.Sprintf(`{"type":"tool_result","tool_use_id":"toolu_%d"}`, n-1-i))
	}
	body := func(results []string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"assistant","content":[` + strings.Join(uses, ",") +
			`]},{"role":"user","content":[` + strings.Join(results, ",") + `]}]}`)
	}
	start := time.Now()
	if _, err := Parse(Messages, body(results), nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("%d results took %v", n, took)
	}
	results[n/2] = `{"type":"tool_result","tool_use_id":"toolu_\u0031x"}`
	if _, err := Parse(Messages, body(results), nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a result that answers none of %d calls: %v", n, err)
	}
	results[n/2] = `{"type":"tool_result","tool_use_id":"toolu_\u0031"}` // toolu_1, escaped
	if _, err := Parse(Messages, body(results), nil); err != nil {
		t.Fatalf("an escaped id: %v", err)
	}
}
