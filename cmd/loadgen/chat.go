package main

import (
	"github.com/kvrouter/kvrouter/sim/workload"
)

// chatMessage is one message of a /v1/chat/completions request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is the body of a streamed /v1/chat/completions request.
type chatRequest struct {
	Model         string        `json:"model,omitempty"`
	Messages      []chatMessage `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatBody renders req as a streamed chat request asking for a final usage chunk: the first
// systemBytes of its prompt (all of it at most) as a system message, the rest as one user
// message. A conversation's turns then share the system message and a growing user message,
// so a later turn's rendered messages start with the earlier turn's, as they do in an agent
// that resends its conversation. Invalid UTF-8 becomes U+FFFD, as encoding/json does.
func chatBody(req workload.Request, systemBytes int) []byte {
	body := chatRequest{Model: req.Model, MaxTokens: req.MaxTokens, Stream: true}
	body.StreamOptions.IncludeUsage = true
	split := min(max(systemBytes, 0), len(req.Prompt))
	if split > 0 {
		body.Messages = append(body.Messages, chatMessage{Role: "system", Content: string(req.Prompt[:split])})
	}
	if split < len(req.Prompt) || split == 0 {
		body.Messages = append(body.Messages, chatMessage{Role: "user", Content: string(req.Prompt[split:])})
	}
	return encodeBody(body)
}
