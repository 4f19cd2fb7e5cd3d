package sim

import (
	"bytes"
	"fmt"

	"github.com/valyala/fastjson"
)

// AppendMessagesJSON appends the routing text of an Anthropic Messages API request, req, to dst,
// as the router renders it: its tools (see AppendToolsJSON), its system prompt ("system\n", the
// text, "\n"), then each message's role, a newline, its content blocks in order and a newline. A
// text block is its text, an image its digest (AppendMedia), a tool_use a tool call of its input
// (AppendToolCall), a tool_result "<tool_result>" its text and images "</tool_result>"; other
// block types add nothing. It refuses, wrapping ErrRender, what Anthropic's API refuses: a block
// that is not an object or names no type, a text block without text, an image without a source,
// a tool_use without id, name or input, and a tool_result that answers no tool_use of the message
// before it.
func AppendMessagesJSON(dst []byte, req *fastjson.Value) ([]byte, error) {
	dst, err := AppendToolsJSON(dst, req.Get("tools"))
	if err != nil {
		return dst, err
	}
	if dst, err = appendSystem(dst, req.Get("system")); err != nil {
		return dst, err
	}
	messages := req.Get("messages")
	if messages == nil || messages.Type() != fastjson.TypeArray {
		return dst, fmt.Errorf("%w: messages must be an array", ErrRender)
	}
	var before, now [][]byte // the tool_use ids of the message before, and of this one
	for i, m := range messages.GetArray() {
		before, now = now, nil
		if dst, now, err = appendAnthropicMessage(dst, m, before); err != nil {
			return dst, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	return dst, nil
}

// billingHeader starts the system block that Claude Code stamps with a hash of each request;
// vLLM leaves it out of the prompt.
var billingHeader = []byte("x-anthropic-billing-header")

func appendSystem(dst []byte, system *fastjson.Value) ([]byte, error) {
	if system == nil || system.Type() == fastjson.TypeNull {
		return dst, nil
	}
	var text []byte
	switch system.Type() {
	case fastjson.TypeString:
		text = system.GetStringBytes()
	case fastjson.TypeArray:
		for i, b := range system.GetArray() {
			t := b.Get("text")
			if string(b.GetStringBytes("type")) != "text" || t == nil || t.Type() != fastjson.TypeString {
				return dst, fmt.Errorf("%w: system[%d] must be a text block", ErrRender, i)
			}
			if !bytes.HasPrefix(t.GetStringBytes(), billingHeader) {
				text = append(text, t.GetStringBytes()...)
			}
		}
	default:
		return dst, fmt.Errorf("%w: system must be a string or an array of text blocks", ErrRender)
	}
	if len(text) == 0 {
		return dst, nil
	}
	return append(append(append(dst, "system\n"...), text...), '\n'), nil
}

// appendAnthropicMessage appends one message; before are the tool_use ids its tool_results may answer,
// and it returns its own.
func appendAnthropicMessage(dst []byte, m *fastjson.Value, before [][]byte) ([]byte, [][]byte, error) {
	role := m.Get("role")
	if m.Type() != fastjson.TypeObject || role == nil || role.Type() != fastjson.TypeString {
		return dst, nil, fmt.Errorf("%w: a message must be an object with a string role", ErrRender)
	}
	dst = append(append(dst, role.GetStringBytes()...), '\n')
	var ids [][]byte
	switch content := m.Get("content"); {
	case content != nil && content.Type() == fastjson.TypeString:
		dst = append(dst, content.GetStringBytes()...)
	case content != nil && content.Type() == fastjson.TypeArray:
		for j, b := range content.GetArray() {
			var err error
			if dst, ids, err = appendBlock(dst, b, ids, before, false); err != nil {
				return dst, nil, fmt.Errorf("content[%d]: %w", j, err)
			}
		}
	default:
		return dst, nil, fmt.Errorf("%w: content must be a string or an array of blocks", ErrRender)
	}
	return append(dst, '\n'), ids, nil
}

// appendBlock appends one content block and adds a tool_use's id to ids; within a tool_result
// (nested) only text and images count.
func appendBlock(dst []byte, b *fastjson.Value, ids, before [][]byte, nested bool) ([]byte, [][]byte, error) {
	typ := b.Get("type")
	if b.Type() != fastjson.TypeObject || typ == nil || typ.Type() != fastjson.TypeString {
		return dst, ids, fmt.Errorf("%w: a block must be an object naming its type", ErrRender)
	}
	var err error
	switch t := string(typ.GetStringBytes()); {
	case t == "text":
		if !isString(b.Get("text")) {
			return dst, ids, fmt.Errorf("%w: a text block without text", ErrRender)
		}
		dst = append(dst, b.GetStringBytes("text")...)
	case t == "image":
		dst, err = appendImage(dst, b.Get("source"))
	case nested:
	case t == "tool_use":
		input, none := b.Get("input"), []byte("{}") // no input, or null, is none, as vLLM takes it
		if !isString(b.Get("id")) || !isString(b.Get("name")) || input != nil && input.Type() != fastjson.TypeObject && input.Type() != fastjson.TypeNull {
			return dst, ids, fmt.Errorf("%w: a tool_use needs a string id and name, and an input object if any", ErrRender)
		}
		if input != nil && input.Type() == fastjson.TypeObject {
			none = input.MarshalTo(nil)
		}
		dst = AppendToolCall(dst, b.GetStringBytes("name"), none)
		ids = append(ids, b.GetStringBytes("id"))
	case t == "tool_result":
		dst, err = appendToolResult(dst, b, before)
	}
	return dst, ids, err
}

func appendToolResult(dst []byte, b *fastjson.Value, before [][]byte) ([]byte, error) {
	id := b.Get("tool_use_id")
	if !isString(id) {
		return dst, fmt.Errorf("%w: a tool_result without a string tool_use_id", ErrRender)
	}
	answered := false
	for _, use := range before {
		answered = answered || bytes.Equal(use, id.GetStringBytes())
	}
	if !answered {
		return dst, fmt.Errorf("%w: tool_result %q answers no tool_use of the message before", ErrRender, id.GetStringBytes())
	}
	dst = append(dst, "<tool_result>"...)
	switch c := b.Get("content"); {
	case c == nil || c.Type() == fastjson.TypeNull:
	case c.Type() == fastjson.TypeString:
		dst = append(dst, c.GetStringBytes()...)
	case c.Type() == fastjson.TypeArray:
		for _, nb := range c.GetArray() {
			var err error
			if dst, _, err = appendBlock(dst, nb, nil, nil, true); err != nil {
				return dst, err
			}
		}
	default:
		return dst, fmt.Errorf("%w: a tool_result's content must be a string or an array of blocks", ErrRender)
	}
	return append(dst, "</tool_result>"...), nil
}

// imageSources names where each kind of image source holds the image.
var imageSources = map[string]string{"base64": "data", "url": "url", "file": "file_id"}

// appendImage appends an image by the digest of its source's data, URL or file id; a source of
// another kind adds nothing.
func appendImage(dst []byte, src *fastjson.Value) ([]byte, error) {
	if src == nil || src.Type() != fastjson.TypeObject || !isString(src.Get("type")) {
		return dst, fmt.Errorf("%w: an image needs a source object naming its type", ErrRender)
	}
	key, known := imageSources[string(src.GetStringBytes("type"))]
	if !known {
		return dst, nil
	}
	if !isString(src.Get(key)) {
		return dst, fmt.Errorf("%w: an image's source lacks its %s", ErrRender, key)
	}
	return AppendMedia(dst, "image", src.GetStringBytes(key)), nil
}

func isString(v *fastjson.Value) bool { return v != nil && v.Type() == fastjson.TypeString }
