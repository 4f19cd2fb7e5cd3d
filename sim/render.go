package sim

import (
	"errors"
	"fmt"

	"github.com/valyala/fastjson"
)

// ErrRender is wrapped by the errors of the JSON rendering helpers: the request does not have
// the shape of an OpenAI request.
var ErrRender = errors.New("sim: cannot render routing text")

// Message is one chat message with its content already flattened to text.
type Message struct {
	Role    string
	Content string
}

// RenderChat returns the routing text of a chat conversation: role + "\n" + content + "\n" per
// message, concatenated. It matches the router's rendering byte for byte.
func RenderChat(messages []Message) []byte {
	n := 0
	for _, m := range messages {
		n += len(m.Role) + len(m.Content) + 2
	}
	out := make([]byte, 0, n)
	for _, m := range messages {
		out = appendMessage(out, m.Role, m.Content)
	}
	return out
}

func appendMessage(dst []byte, role, content string) []byte {
	dst = append(dst, role...)
	dst = append(dst, '\n')
	dst = append(dst, content...)
	return append(dst, '\n')
}

// AppendChatJSON appends the routing text of a chat request's "messages" array to dst. A
// message's content is a string, null (empty), or an array of parts whose "text" fields are
// concatenated (parts without text, such as images, add nothing).
func AppendChatJSON(dst []byte, messages *fastjson.Value) ([]byte, error) {
	if messages == nil || messages.Type() != fastjson.TypeArray {
		return dst, fmt.Errorf("%w: messages must be an array", ErrRender)
	}
	for i, m := range messages.GetArray() {
		if m.Type() != fastjson.TypeObject {
			return dst, fmt.Errorf("%w: messages[%d] must be an object", ErrRender, i)
		}
		dst = append(dst, m.GetStringBytes("role")...)
		dst = append(dst, '\n')
		var err error
		if dst, err = appendContent(dst, m.Get("content")); err != nil {
			return dst, fmt.Errorf("messages[%d]: %w", i, err)
		}
		dst = append(dst, '\n')
	}
	return dst, nil
}

func appendContent(dst []byte, content *fastjson.Value) ([]byte, error) {
	if content == nil {
		return dst, nil
	}
	switch content.Type() {
	case fastjson.TypeNull:
		return dst, nil
	case fastjson.TypeString:
		return append(dst, content.GetStringBytes()...), nil
	case fastjson.TypeArray:
		for _, part := range content.GetArray() {
			dst = append(dst, part.GetStringBytes("text")...)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%w: content must be a string, an array of parts or null", ErrRender)
}

// AppendPromptJSON appends the routing text of a completion request's "prompt" to dst: the
// string itself, or the concatenation of an array of strings.
func AppendPromptJSON(dst []byte, prompt *fastjson.Value) ([]byte, error) {
	if prompt == nil {
		return dst, fmt.Errorf("%w: prompt is missing", ErrRender)
	}
	switch prompt.Type() {
	case fastjson.TypeString:
		return append(dst, prompt.GetStringBytes()...), nil
	case fastjson.TypeArray:
		for i, p := range prompt.GetArray() {
			if p.Type() != fastjson.TypeString {
				return dst, fmt.Errorf("%w: prompt[%d] must be a string", ErrRender, i)
			}
			dst = append(dst, p.GetStringBytes()...)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%w: prompt must be a string or an array of strings", ErrRender)
}
