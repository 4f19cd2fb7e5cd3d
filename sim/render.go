package sim

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/valyala/fastjson"
	"github.com/zeebo/xxh3"
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

// AppendChatRequestJSON appends the routing text of a chat request, req, to dst: its tools (see
// AppendToolsJSON), then its messages (see AppendChatJSON).
func AppendChatRequestJSON(dst []byte, req *fastjson.Value) ([]byte, error) {
	dst, err := AppendToolsJSON(dst, req.Get("tools"))
	if err != nil {
		return dst, err
	}
	return AppendChatJSON(dst, req.Get("messages"))
}

// AppendToolsJSON appends the routing text of the tools a request declares: "tools\n", then each
// tool's JSON as the client wrote it, compacted, and a newline. Absent, null or empty: nothing, as
// engines render no tools then.
func AppendToolsJSON(dst []byte, tools *fastjson.Value) ([]byte, error) {
	if tools == nil || tools.Type() == fastjson.TypeNull {
		return dst, nil
	}
	ts, err := tools.Array()
	if err != nil {
		return dst, fmt.Errorf("%w: tools must be an array", ErrRender)
	}
	if len(ts) == 0 {
		return dst, nil
	}
	dst = append(dst, "tools\n"...)
	for i, t := range ts {
		if t.Type() != fastjson.TypeObject {
			return dst, fmt.Errorf("%w: tools[%d] must be an object", ErrRender, i)
		}
		dst = append(t.MarshalTo(dst), '\n') // written as it came: its strings not read
	}
	return dst, nil
}

// AppendChatJSON appends the routing text of a chat request's "messages" array to dst: each
// message's role, a newline, its content, its tool calls ("<tool_call:name>arguments</tool_call>")
// and a newline. A content is a string, null (empty), or an array of parts: their text, and an
// image, a sound or a file by its digest (see AppendMedia), in order.
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
		dst = appendToolCalls(dst, m)
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
			dst = appendPartMedia(dst, part)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%w: content must be a string, an array of parts or null", ErrRender)
}

// partMedia are the media a content part may carry: its field, and the members of that field's
// object that hold the medium's URL or bytes (the field may also be the string itself).
var partMedia = []struct {
	kind, field string
	keys        []string
}{
	{"image", "image_url", []string{"url"}}, {"audio", "input_audio", []string{"data"}},
	{"file", "file", []string{"file_data", "file_id"}},
}

// appendPartMedia appends the digest of a content part's image, sound or file.
func appendPartMedia(dst []byte, part *fastjson.Value) []byte {
	for _, m := range partMedia {
		v := part.Get(m.field)
		if v != nil && v.Type() == fastjson.TypeString {
			dst = AppendMedia(dst, m.kind, v.GetStringBytes())
			continue
		}
		for _, key := range m.keys {
			if s := v.Get(key); s != nil && s.Type() == fastjson.TypeString {
				dst = AppendMedia(dst, m.kind, s.GetStringBytes())
				break
			}
		}
	}
	return dst
}

// appendToolCalls appends the calls of an assistant message: its tool_calls' functions, and the
// legacy function_call.
func appendToolCalls(dst []byte, m *fastjson.Value) []byte {
	dst = appendFunctionCall(dst, m.Get("function_call"))
	for _, c := range m.GetArray("tool_calls") {
		dst = appendFunctionCall(dst, c.Get("function"))
	}
	return dst
}

func appendFunctionCall(dst []byte, f *fastjson.Value) []byte {
	if f == nil || f.Type() != fastjson.TypeObject {
		return dst
	}
	return AppendToolCall(dst, f.GetStringBytes("name"), f.GetStringBytes("arguments"))
}

// AppendToolCall appends a tool call as the router renders one: "<tool_call:name>arguments</tool_call>".
func AppendToolCall(dst, name, arguments []byte) []byte {
	dst = append(append(append(dst, "<tool_call:"...), name...), '>')
	return append(append(dst, arguments...), "</tool_call>"...)
}

// AppendMedia appends the stand-in of a medium (an image, a sound, a file) whose URL or bytes are
// data, as the router renders one: "<kind:16 hex digits of data's xxh3>". An engine's prompt holds
// the medium's tokens there; the same medium renders the same.
func AppendMedia(dst []byte, kind string, data []byte) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxh3.Hash(data))
	dst = append(append(append(dst, '<'), kind...), ':')
	return append(hex.AppendEncode(dst, b[:]), '>')
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
