package wire

// The reference reading of request bodies: the fastjson document tree the
// router read bodies with before it scanned them itself. The tests check
// that parseInference agrees with it on every body.

import (
	"fmt"

	"github.com/valyala/fastjson"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
)

// parseInferenceTree reads an inference request body.
func parseInferenceTree(ep *Endpoint, body []byte) (Inference, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return Inference{}, Errorf(ErrBadRequest, "malformed JSON body: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return Inference{}, Errorf(ErrBadRequest, "the body must be a JSON object")
	}
	if err := treeUniqueKeys(v, "the body"); err != nil {
		return Inference{}, err
	}
	var in Inference
	if in.Model, err = treeStringField(v, "model"); err != nil {
		return Inference{}, err
	}
	if in.Model == "" {
		return Inference{}, Errorf(ErrBadRequest, "missing required field: model")
	}
	if s := v.Get("stream"); s != nil {
		if in.Stream, err = s.Bool(); err != nil {
			return Inference{}, Errorf(ErrBadRequest, "field stream must be a boolean")
		}
	}
	for _, key := range []string{"session_id", "user"} {
		if in.Session, _ = treeStringField(v, key); in.Session != "" {
			break
		}
	}
	if err := checkModelName(in.Model); err != nil {
		return Inference{}, err
	}
	var text []byte
	switch ep.Kind {
	case KindChat:
		text, err = treeRenderChat(v)
	case KindMessages:
		text, err = treeRenderAnthropic(v)
		if in.Session == "" {
			in.Session, _ = treeStringField(v.Get("metadata"), "user_id")
		}
	default:
		text, err = treeRenderPrompt(v.Get("prompt"))
	}
	in.Text = affinity.Text{text}
	return in, err
}

// treeRenderChat renders a chat request: its tools, then its messages.
func treeRenderChat(v *fastjson.Value) ([]byte, error) {
	text, err := treeRenderTools(nil, v.Get("tools"))
	if err != nil {
		return nil, err
	}
	messages, err := treeRenderMessages(v.Get("messages"))
	return append(text, messages...), err
}

// treeRenderTools renders the tools a request declares: each as its JSON.
func treeRenderTools(out []byte, tools *fastjson.Value) ([]byte, error) {
	if tools == nil || tools.Type() == fastjson.TypeNull {
		return out, nil
	}
	ts, err := tools.Array()
	if err != nil {
		return nil, Errorf(ErrBadRequest, "field tools must be an array of objects")
	}
	if len(ts) > maxTools {
		return nil, Errorf(ErrBadRequest, "too many tools")
	}
	if len(ts) == 0 {
		return out, nil
	}
	out = append(out, "tools\n"...)
	for i, t := range ts {
		if t.Type() != fastjson.TypeObject {
			return nil, Errorf(ErrBadRequest, "tools[%d] must be an object", i)
		}
		out = append(t.MarshalTo(out), '\n')
	}
	return out, nil
}

func treeStringField(v *fastjson.Value, key string) (string, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", Errorf(ErrBadRequest, "field %s must be a string", key)
	}
	return string(b), nil
}

// treeRenderPrompt returns a completions prompt: a string, or an array of
// strings concatenated. Token-id prompts route on their JSON text.
func treeRenderPrompt(p *fastjson.Value) ([]byte, error) {
	if p == nil {
		return nil, Errorf(ErrBadRequest, "missing required field: prompt")
	}
	switch p.Type() {
	case fastjson.TypeString:
		return p.GetStringBytes(), nil
	case fastjson.TypeArray:
		var out []byte
		for _, item := range p.GetArray() {
			if item.Type() == fastjson.TypeString {
				out = append(out, item.GetStringBytes()...)
			} else {
				out = item.MarshalTo(out)
			}
		}
		return out, nil
	}
	return nil, Errorf(ErrBadRequest, "field prompt must be a string or an array")
}

// treeRenderMessages renders chat messages: role, content, tool calls and
// a newline each.
func treeRenderMessages(m *fastjson.Value) ([]byte, error) {
	if m == nil {
		return nil, Errorf(ErrBadRequest, "missing required field: messages")
	}
	msgs, err := m.Array()
	if err != nil {
		return nil, Errorf(ErrBadRequest, "field messages must be an array")
	}
	var out []byte
	for i, msg := range msgs {
		if msg.Type() != fastjson.TypeObject {
			return nil, Errorf(ErrBadRequest, "messages[%d] must be an object", i)
		}
		if err := treeUniqueKeys(msg, fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
		out = append(out, msg.GetStringBytes("role")...)
		out = append(out, '\n')
		for _, key := range []string{"content", "output"} {
			if out, err = treeAppendContent(out, msg.Get(key), i); err != nil {
				return nil, err
			}
		}
		if msg.Get("arguments") != nil && msg.Get("arguments").Type() == fastjson.TypeString {
			out = treeAppendCall(out, msg.Get("name"), msg.Get("arguments"))
		}
		if out, err = treeAppendFunction(out, msg.Get("function_call")); err != nil {
			return nil, err
		}
		if calls := msg.Get("tool_calls"); calls != nil && calls.Type() == fastjson.TypeArray {
			for _, c := range calls.GetArray() {
				if c.Type() != fastjson.TypeObject {
					continue
				}
				if err := treeUniqueKeys(c, "tool call"); err != nil {
					return nil, err
				}
				if out, err = treeAppendFunction(out, c.Get("function")); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, '\n')
	}
	return out, nil
}

// treeAppendFunction appends a function call, f, when it is an object.
func treeAppendFunction(out []byte, f *fastjson.Value) ([]byte, error) {
	if f == nil || f.Type() != fastjson.TypeObject {
		return out, nil
	}
	if err := treeUniqueKeys(f, "function"); err != nil {
		return nil, err
	}
	return treeAppendCall(out, f.Get("name"), f.Get("arguments")), nil
}

// treeAppendCall appends "<tool_call:name>arguments</tool_call>".
func treeAppendCall(out []byte, name, arguments *fastjson.Value) []byte {
	out = append(out, "<tool_call:"...)
	out = append(treeAppendString(out, name), '>')
	if arguments != nil && arguments.Type() == fastjson.TypeObject {
		out = arguments.MarshalTo(out)
	} else {
		out = treeAppendString(out, arguments)
	}
	return append(out, "</tool_call>"...)
}

// treeAppendString appends v's contents when it is a string.
func treeAppendString(out []byte, v *fastjson.Value) []byte {
	if v != nil && v.Type() == fastjson.TypeString {
		out = append(out, v.GetStringBytes()...)
	}
	return out
}

func treeAppendContent(out []byte, c *fastjson.Value, msg int) ([]byte, error) {
	if c == nil {
		return out, nil
	}
	switch c.Type() {
	case fastjson.TypeString:
		return append(out, c.GetStringBytes()...), nil
	case fastjson.TypeArray:
		for j, part := range c.GetArray() {
			if part.Type() != fastjson.TypeObject {
				continue
			}
			if err := treeUniqueKeys(part, fmt.Sprintf("messages[%d].content[%d]", msg, j)); err != nil {
				return nil, err
			}
			out = treeAppendString(out, part.Get("text"))
			var err error
			for _, m := range []struct{ kind, field, key, alt string }{
				{"image", "image_url", "url", ""}, {"audio", "input_audio", "data", ""}, {"file", "file", "file_data", "file_id"},
			} {
				if out, err = treeAppendMedia(out, m.kind, part.Get(m.field), m.key, m.alt); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// treeAppendMedia appends the digest of a medium: v itself when it is a
// string, else its member key (or alt) when it is an object.
func treeAppendMedia(out []byte, kind string, v *fastjson.Value, key, alt string) ([]byte, error) {
	if v == nil {
		return out, nil
	}
	switch v.Type() {
	case fastjson.TypeString:
		return appendMedia(out, kind, xxh3.Hash(v.GetStringBytes())), nil
	case fastjson.TypeObject:
		if err := treeUniqueKeys(v, kind); err != nil {
			return nil, err
		}
		for _, k := range []string{key, alt} {
			if f := v.Get(k); k != "" && f != nil && f.Type() == fastjson.TypeString {
				return appendMedia(out, kind, xxh3.Hash(f.GetStringBytes())), nil
			}
		}
	}
	return out, nil
}

// treeUniqueKeys refuses an object that names a key twice. fastjson reads the
// first of them and the engines' JSON parsers the last, so the router would
// route (and count, and check) another request than the one the worker
// answers.
func treeUniqueKeys(v *fastjson.Value, where string) error {
	o, _ := v.Object()
	var small [16][]byte
	keys := small[:0]
	var many map[string]struct{} // past 16 keys, so a stranger's huge object costs linear time
	var dup []byte
	o.Visit(func(k []byte, _ *fastjson.Value) {
		switch {
		case dup != nil:
		case many != nil:
			if _, ok := many[string(k)]; ok {
				dup = k
			}
			many[string(k)] = struct{}{}
		default:
			for _, s := range keys {
				if string(s) == string(k) {
					dup = k
				}
			}
			if keys = append(keys, k); len(keys) == len(small) {
				many = make(map[string]struct{}, 2*len(small))
				for _, s := range keys {
					many[string(s)] = struct{}{}
				}
			}
		}
	})
	if dup != nil {
		return Errorf(ErrBadRequest, "%s names the key %q twice", where, dup)
	}
	return nil
}
