package proxy

import (
	"fmt"
	"strings"
)

// An agent's turns on Anthropic's Messages API and the tools of chat
// agents, as package wire's routing-text tests write them: the end-to-end
// tests here send the same conversations through a router.

func anthropicTurn(tools string, turns int) string {
	var m strings.Builder
	m.WriteString(`{"role":"user","content":"Fix the test."}`)
	for t := range turns {
		fmt.Fprintf(&m, `,{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_%d",`+
			`"name":"read","input":{"path":"f%d.go"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d",`+
			`"content":"package f%d"}]}`, t, t, t, t)
	}
	return `{"model":"m","max_tokens":64,"messages":[` + m.String() + `],"system":"You are a coding agent.","tools":` + tools + `}`
}

const (
	chatTools = `[{"type":"function","function":{"name":"read","description":"Reads a file.","parameters":{"type":"object",` +
		`"properties":{"path":{"type":"string"}}}}},{"type":"function","function":{"name":"write","parameters":{}}}]`
	otherChatTools = `[{"type":"function","function":{"name":"search","description":"Searches the web.","parameters":{}}}]`
	anthropicTools = `[{"name":"read","description":"Reads a file.","input_schema":{"type":"object","properties":{"path":` +
		`{"type":"string"}}}},{"name":"write","input_schema":{"type":"object"}}]`
)
