package wire

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// benchSizes are the sizes of the bodies read, as the proxy's benchmarks
// send them.
var benchSizes = []int{4 << 10, 64 << 10}

func sizeName(n int) string { return "body=" + strconv.Itoa(n>>10) + "KiB" }

// benchChatBody is a chat request of about size bytes: a system prompt
// and a user turn, the shape an agent sends.
func benchChatBody(size int, stream bool) []byte {
	filler := strings.Repeat("You are a careful assistant. ", size/29+1)[:max(size-160, 16)]
	return fmt.Appendf(nil, `{"model":"m","stream":%v,"max_tokens":16,"messages":[{"role":"system","content":%q},`+
		`{"role":"user","content":"Summarise the conversation so far."}]}`, stream, filler)
}

// BenchmarkParseInference is reading a chat body: validating it and
// rendering its routing text. The agent bodies are an agent's turn, its
// tools, tool calls and tool results, as /v1/chat/completions and as
// /v1/messages.
func BenchmarkParseInference(b *testing.B) {
	for _, size := range benchSizes {
		benchParse(b, sizeName(size), ChatCompletions, benchChatBody(size, false))
	}
	for _, size := range benchSizes {
		benchParse(b, "agent/"+sizeName(size), ChatCompletions, benchAgentChatBody(size))
	}
	for _, size := range benchSizes {
		benchParse(b, "agent-messages/"+sizeName(size), Messages, benchAgentMessagesBody(size))
	}
}

func benchParse(b *testing.B, name string, ep *Endpoint, body []byte) {
	b.Run(name, func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			text := textBuffers.Get().(*RoutingText) // as an exchange does
			if _, err := Parse(ep, body, text); err != nil {
				b.Fatal(err)
			}
			ReleaseText(text)
		}
	})
}

// benchTools is the tools of an agent, as a chat request declares them.
func benchTools(n int) string {
	var s strings.Builder
	for i := range n {
		if i > 0 {
			s.WriteByte(',')
		}
		fmt.Fprintf(&s, `{"type":"function","function":{"name":"tool_%d","description":"Runs the tool number %d on the `+
			`workspace and returns what it printed.","parameters":{"type":"object","properties":{"path":{"type":"string",`+
			`"description":"the file"},"query":{"type":"string"}},"required":["path"]}}}`, i, i)
	}
	return s.String()
}

// benchAgentMessagesBody is benchAgentChatBody's agent on Anthropic's
// Messages API.
func benchAgentMessagesBody(size int) []byte {
	var s strings.Builder
	tools := strings.NewReplacer(`{"type":"function","function":`, ``, `"parameters"`, `"input_schema"`, `}}},`, `}},`).
		Replace(benchTools(20) + ",")
	s.WriteString(`{"model":"m","max_tokens":16,"system":"You are a careful coding agent. Use the tools.","tools":[` +
		strings.TrimSuffix(tools, ",") + `],"messages":[{"role":"user","content":"Fix the failing test in the parser package."}`)
	result := strings.Repeat("ok 1 parser 0.02s\\nFAIL parse_test.go:12 want 3 got 4\\n", 20)
	for turn := 0; s.Len() < size; turn++ {
		fmt.Fprintf(&s, `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","name":"tool_%d",`+
			`"input":{"path":"parse_%d.go"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d",`+
			`"content":"%s"}]}`, turn, turn%20, turn, turn, result)
	}
	s.WriteString(`]}`)
	return []byte(s.String())
}

// benchAgentChatBody is a chat request of about size bytes: twenty tools,
// a system prompt, a task, then turns of a tool call and its result.
func benchAgentChatBody(size int) []byte {
	var s strings.Builder
	s.WriteString(`{"model":"m","max_tokens":16,"tools":[` + benchTools(20) + `],"messages":[` +
		`{"role":"system","content":"You are a careful coding agent. Use the tools."},` +
		`{"role":"user","content":"Fix the failing test in the parser package."}`)
	result := strings.Repeat("ok 1 parser 0.02s\\nFAIL parse_test.go:12 want 3 got 4\\n", 20)
	for turn := 0; s.Len() < size; turn++ {
		fmt.Fprintf(&s, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function",`+
			`"function":{"name":"tool_%d","arguments":"{\"path\":\"parse_%d.go\"}"}}]},`+
			`{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, turn, turn%20, turn, turn, result)
	}
	s.WriteString(`]}`)
	return []byte(s.String())
}
