// Package agentturns writes the bodies of an agent's turns on the chat
// completions and Messages APIs, with tools, as the SDKs write them: the
// routing-text tests of proxy/wire and the end-to-end tests of proxy send
// the same conversations.
package agentturns

import (
	"fmt"
	"strings"
)

// Chat is the body of a chat completions turn after turns rounds of a tool
// call and its result, with tools as its tools (messages first, tools last).
func Chat(tools string, turns int) string {
	var m strings.Builder
	m.WriteString(`{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the test."}`)
	for t := range turns {
		fmt.Fprintf(&m, `,{"role":"assistant","content":"Looking.","tool_calls":[{"id":"call_%d","type":"function",`+
			`"function":{"name":"read","arguments":"{\"path\":\"f%d.go\"}"}}]},{"role":"tool","tool_call_id":"call_%d","content":"package f%d"}`, t, t, t, t)
	}
	return `{"model":"m","max_tokens":64,"messages":[` + m.String() + `],"tools":` + tools + `}`
}

// Anthropic is Chat's turn on the Messages API (the system and tools last).
func Anthropic(tools string, turns int) string {
	var m strings.Builder
	m.WriteString(`{"role":"user","content":"Fix the test."}`)
	for t := range turns {
		fmt.Fprintf(&m, `,{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_%d",`+
			`"name":"read","input":{"path":"f%d.go"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d",`+
			`"content":"package f%d"}]}`, t, t, t, t)
	}
	return `{"model":"m","max_tokens":64,"messages":[` + m.String() + `],"system":"You are a coding agent.","tools":` + tools + `}`
}

// Tool lists: two tools, and another one, in each API's shape.
const (
	ChatTools = `[{"type":"function","function":{"name":"read","description":"Reads a file.","parameters":{"type":"object",` +
		`"properties":{"path":{"type":"string"}}}}},{"type":"function","function":{"name":"write","parameters":{}}}]`
	OtherChatTools = `[{"type":"function","function":{"name":"search","description":"Searches the web.","parameters":{}}}]`
	AnthropicTools = `[{"name":"read","description":"Reads a file.","input_schema":{"type":"object","properties":{"path":` +
		`{"type":"string"}}}},{"name":"write","input_schema":{"type":"object"}}]`
	OtherAnthropicTools = `[{"name":"search","description":"Searches the web.","input_schema":{"type":"object"}}]`
)
