package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// An agent's turn as a tool-calling agent sends it (--tools N): the tools it declares, its system
// prompt, the task, then, for every turn before, the model's answer with a call of one of the
// tools and the tool's output as that call's result. The same sessions go out as chat completions
// (tool_calls, role tool) or as Anthropic's Messages API (tool_use, tool_result), so that a bench
// compares the two APIs on the same conversations.

// agentTool is a tool of the agent, as either API declares one.
type agentTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Schema      map[string]any `json:"-"`
}

// agentTools are the n tools of every session: the same for all, as one agent's are.
func agentTools(n int) []agentTool {
	tools := make([]agentTool, n)
	for i := range tools {
		tools[i] = agentTool{
			Name: fmt.Sprintf("tool_%02d", i),
			Description: fmt.Sprintf("Runs the workspace tool number %d on a path and returns what it printed: "+
				"file contents, test results or the output of a command.", i),
			Schema: map[string]any{"type": "object", "required": []string{"path"}, "properties": map[string]any{
				"path":  map[string]any{"type": "string", "description": "the file or directory to act on"},
				"query": map[string]any{"type": "string", "description": "what to look for"},
			}},
		}
	}
	return tools
}

// agentTurn is a turn cut into its pieces (workload.Request.Pieces): the system prompt, the task,
// and the answers and tool outputs of the turns before, in order.
type agentTurn struct {
	system, task string
	steps        []agentStep
}

// agentStep is one turn before: the model's answer, and the output of the tool it called.
type agentStep struct{ answer, output string }

// cutTurn cuts req's prompt at its pieces. Invalid UTF-8 becomes U+FFFD when encoded.
func cutTurn(req workload.Request) agentTurn {
	p, text := req.Pieces, req.Prompt
	t := agentTurn{system: string(text[:p[0]]), task: string(text[p[0]:p[1]])}
	for i := 2; i+1 < len(p); i += 2 {
		t.steps = append(t.steps, agentStep{answer: string(text[p[i-1]:p[i]]), output: string(text[p[i]:p[i+1]])})
	}
	return t
}

// call is what step i calls: a tool of the n, in turn, and its arguments.
func call(i, n int) (name string, args map[string]any) {
	return fmt.Sprintf("tool_%02d", i%n), map[string]any{"path": fmt.Sprintf("src/file_%d.go", i)}
}

// agentChatBody is req as a streamed chat completion of an agent with the tools.
func agentChatBody(req workload.Request, tools []agentTool) []byte {
	t := cutTurn(req)
	type function struct {
		Name        string         `json:"name"`
		Description string         `json:"description,omitempty"`
		Parameters  map[string]any `json:"parameters,omitempty"`
		Arguments   string         `json:"arguments,omitempty"`
	}
	type toolCall struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    string     `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	msgs := []message{{Role: "system", Content: t.system}, {Role: "user", Content: t.task}}
	for i, s := range t.steps {
		name, args := call(i, len(tools))
		arguments, _ := json.Marshal(args)
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, message{Role: "assistant", Content: s.answer,
			ToolCalls: []toolCall{{ID: id, Type: "function", Function: function{Name: name, Arguments: string(arguments)}}}},
			message{Role: "tool", Content: s.output, ToolCallID: id})
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	decl := make([]tool, len(tools))
	for i, d := range tools {
		decl[i] = tool{Type: "function", Function: function{Name: d.Name, Description: d.Description, Parameters: d.Schema}}
	}
	body := struct {
		Model         string    `json:"model,omitempty"`
		Messages      []message `json:"messages"`
		Tools         []tool    `json:"tools"`
		MaxTokens     int       `json:"max_tokens"`
		Stream        bool      `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}{Model: req.Model, Messages: msgs, Tools: decl, MaxTokens: req.MaxTokens, Stream: true}
	body.StreamOptions.IncludeUsage = true
	return encodeBody(body)
}

// agentMessagesBody is req as a streamed Anthropic Messages API request of an agent with the
// tools.
func agentMessagesBody(req workload.Request, tools []agentTool) []byte {
	t := cutTurn(req)
	type block struct {
		Type      string         `json:"type"`
		Text      string         `json:"text,omitempty"`
		ID        string         `json:"id,omitempty"`
		Name      string         `json:"name,omitempty"`
		Input     map[string]any `json:"input,omitempty"`
		ToolUseID string         `json:"tool_use_id,omitempty"`
		Content   string         `json:"content,omitempty"`
	}
	type message struct {
		Role    string  `json:"role"`
		Content []block `json:"content"`
	}
	msgs := []message{{Role: "user", Content: []block{{Type: "text", Text: t.task}}}}
	for i, s := range t.steps {
		name, args := call(i, len(tools))
		id := fmt.Sprintf("toolu_%d", i)
		msgs = append(msgs, message{Role: "assistant", Content: []block{{Type: "text", Text: s.answer},
			{Type: "tool_use", ID: id, Name: name, Input: args}}},
			message{Role: "user", Content: []block{{Type: "tool_result", ToolUseID: id, Content: s.output}}})
	}
	type tool struct {
		agentTool
		InputSchema map[string]any `json:"input_schema"`
	}
	decl := make([]tool, len(tools))
	for i, d := range tools {
		decl[i] = tool{agentTool: d, InputSchema: d.Schema}
	}
	return encodeBody(struct {
		Model     string    `json:"model,omitempty"`
		System    string    `json:"system"`
		Messages  []message `json:"messages"`
		Tools     []tool    `json:"tools"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
	}{Model: req.Model, System: t.system, Messages: msgs, Tools: decl, MaxTokens: req.MaxTokens, Stream: true})
}

// messagesBody is req as a streamed Anthropic Messages API request without tools: the first
// systemBytes of its prompt as the system prompt, the rest as one user message, as chatBody
// cuts it.
func messagesBody(req workload.Request, systemBytes int) []byte {
	split := min(max(systemBytes, 0), len(req.Prompt))
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	return encodeBody(struct {
		Model     string    `json:"model,omitempty"`
		System    string    `json:"system,omitempty"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
	}{Model: req.Model, System: string(req.Prompt[:split]), Messages: []message{{Role: "user", Content: string(req.Prompt[split:])}},
		MaxTokens: req.MaxTokens, Stream: true})
}

// encodeBody encodes a body of strings, ints and maps of them, HTML left as it is.
func encodeBody(body any) []byte {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // prompts are not HTML; keep them as they are
	if err := enc.Encode(body); err != nil {
		panic("a body of strings, ints and maps does not encode: " + err.Error())
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}
