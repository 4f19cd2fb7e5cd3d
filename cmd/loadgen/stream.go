package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/valyala/fastjson"
)

// Stream failures, each counted under its own error kind.
var (
	// errStreamCut: the stream ended before "data: [DONE]".
	errStreamCut = errors.New("stream ended before [DONE]")
	// errStreamError: the server sent an error object inside the stream.
	errStreamError = errors.New("error event in stream")
	// errBadUsage: a usage chunk that is not valid JSON or has invalid counts.
	errBadUsage = errors.New("malformed usage chunk")
)

// usage is the token accounting of a completion (OpenAI "usage").
type usage struct {
	promptTokens     int // usage.prompt_tokens
	completionTokens int // usage.completion_tokens
	cachedTokens     int // usage.prompt_tokens_details.cached_tokens; 0 when absent
}

// completionStream follows the events of one streamed completion. It is not safe for concurrent
// use; one per request.
type completionStream struct {
	// anthropic: the stream is Anthropic's Messages API's (messagesEvent).
	anthropic bool
	parser    fastjson.Parser
	events    int    // data events other than [DONE] (Anthropic's: text and tool input deltas)
	done      bool   // [DONE] (Anthropic's message_stop) arrived
	usage     *usage // from the last chunk carrying a usage object
	usageBuf  usage
}

var (
	doneMarker = []byte("[DONE]")
	usageKey   = []byte(`"usage"`)
	errorKey   = []byte(`"error"`)
)

// onEvent takes the data of one event. Only chunks that mention a "usage" or "error" key are
// parsed: token chunks need only be counted, and parsing every one of them would make the
// generator, not the server, the bottleneck. A quoted key cannot hide inside a JSON string
// (its quotes would be escaped), so the test on raw bytes finds every such key.
func (s *completionStream) onEvent(data []byte) error {
	if s.anthropic {
		return s.messagesEvent(data)
	}
	if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		s.done = true
		return nil
	}
	s.events++
	hasUsage, hasError := bytes.Contains(data, usageKey), bytes.Contains(data, errorKey)
	if !hasUsage && !hasError {
		return nil
	}
	chunk, err := s.parser.ParseBytes(data)
	if err != nil {
		if hasError {
			return fmt.Errorf("%w: %s", errStreamError, excerpt(data))
		}
		return fmt.Errorf("%w: %w", errBadUsage, err)
	}
	if e := chunk.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
		return fmt.Errorf("%w: %s", errStreamError, excerpt(data))
	}
	return s.readUsage(chunk.Get("usage"))
}

// readUsage records a usage object; null or absent usage (intermediate chunks) is ignored.
func (s *completionStream) readUsage(u *fastjson.Value) error {
	if u == nil || u.Type() == fastjson.TypeNull {
		return nil
	}
	if u.Type() != fastjson.TypeObject {
		return fmt.Errorf("%w: usage is %s", errBadUsage, u.Type())
	}
	prompt, err1 := countField(u, "prompt_tokens")
	completion, err2 := countField(u, "completion_tokens")
	cached, err3 := countField(u, "prompt_tokens_details", "cached_tokens")
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	s.usageBuf = usage{promptTokens: prompt, completionTokens: completion, cachedTokens: cached}
	s.usage = &s.usageBuf
	return nil
}

// countField reads a non-negative integer at path; absent or null reads as 0.
func countField(v *fastjson.Value, path ...string) (int, error) {
	f := v.Get(path...)
	if f == nil || f.Type() == fastjson.TypeNull {
		return 0, nil
	}
	n, err := f.Int()
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %v is %s", errBadUsage, path, excerpt([]byte(f.String())))
	}
	return n, nil
}

// excerpt cuts a server's bytes for an error message.
func excerpt(data []byte) string {
	const limit = 120
	if len(data) > limit {
		return string(data[:limit]) + "..."
	}
	return string(data)
}

var (
	messageStop  = []byte(`"type":"message_stop"`)
	contentDelta = []byte(`"type":"content_block_delta"`)
)

// messagesEvent takes the data of one event of Anthropic's Messages API: message_stop ends the
// stream, an error event fails it, and the usage comes in two parts, the prompt's in
// message_start (input_tokens, cache_read_input_tokens) and the output's in message_delta, which
// may restate the prompt's. In Anthropic's accounting input_tokens are the prompt's tokens not
// read from the cache: the prompt is the sum.
func (s *completionStream) messagesEvent(data []byte) error {
	if bytes.Contains(data, messageStop) {
		s.done = true
		return nil
	}
	if bytes.Contains(data, contentDelta) {
		s.events++
	}
	hasUsage, hasError := bytes.Contains(data, usageKey), bytes.Contains(data, errorKey)
	if !hasUsage && !hasError {
		return nil
	}
	ev, err := s.parser.ParseBytes(data)
	if err != nil || hasError && string(ev.GetStringBytes("type")) == "error" {
		return fmt.Errorf("%w: %s", errStreamError, excerpt(data))
	}
	u := ev.Get("usage")
	if m := ev.Get("message"); m != nil {
		u = m.Get("usage")
	}
	return s.readMessagesUsage(u)
}

// readMessagesUsage adds an Anthropic usage object to what the stream said so far.
func (s *completionStream) readMessagesUsage(u *fastjson.Value) error {
	if u == nil || u.Type() != fastjson.TypeObject {
		return nil
	}
	input, err1 := countField(u, "input_tokens")
	read, err2 := countField(u, "cache_read_input_tokens")
	written, err3 := countField(u, "cache_creation_input_tokens")
	output, err4 := countField(u, "output_tokens")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	if u.Exists("input_tokens") {
		s.usageBuf.promptTokens, s.usageBuf.cachedTokens = input+read+written, read
	}
	if u.Exists("output_tokens") {
		s.usageBuf.completionTokens = output
	}
	s.usage = &s.usageBuf
	return nil
}
