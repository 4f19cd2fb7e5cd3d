package proxy

// The reference reading of request bodies: the fastjson document tree the
// router read bodies with before it scanned them itself. The tests check
// that parseInference agrees with it on every body.

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/affinity"
)

// parseInferenceTree reads an inference request body.
func parseInferenceTree(ep *endpoint, body []byte) (inference, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return inference{}, errorf(ErrBadRequest, "malformed JSON body: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return inference{}, errorf(ErrBadRequest, "the body must be a JSON object")
	}
	if err := treeUniqueKeys(v, "the body"); err != nil {
		return inference{}, err
	}
	var in inference
	if in.model, err = treeStringField(v, "model"); err != nil {
		return inference{}, err
	}
	if in.model == "" {
		return inference{}, errorf(ErrBadRequest, "missing required field: model")
	}
	if s := v.Get("stream"); s != nil {
		if in.stream, err = s.Bool(); err != nil {
			return inference{}, errorf(ErrBadRequest, "field stream must be a boolean")
		}
	}
	for _, key := range []string{"session_id", "user"} {
		if in.session, _ = treeStringField(v, key); in.session != "" {
			break
		}
	}
	var text []byte
	if ep == chatCompletions {
		text, err = treeRenderMessages(v.Get("messages"))
	} else {
		text, err = treeRenderPrompt(v.Get("prompt"))
	}
	in.text = affinity.Text{text}
	return in, err
}

func treeStringField(v *fastjson.Value, key string) (string, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", errorf(ErrBadRequest, "field %s must be a string", key)
	}
	return string(b), nil
}

// treeRenderPrompt returns a completions prompt: a string, or an array of
// strings concatenated. Token-id prompts route on their JSON text.
func treeRenderPrompt(p *fastjson.Value) ([]byte, error) {
	if p == nil {
		return nil, errorf(ErrBadRequest, "missing required field: prompt")
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
	return nil, errorf(ErrBadRequest, "field prompt must be a string or an array")
}

// treeRenderMessages renders chat messages the way workers see them for prefix
// purposes: role + "\n" + content + "\n" each, where content is a string or
// the concatenated text parts of an array.
func treeRenderMessages(m *fastjson.Value) ([]byte, error) {
	if m == nil {
		return nil, errorf(ErrBadRequest, "missing required field: messages")
	}
	msgs, err := m.Array()
	if err != nil {
		return nil, errorf(ErrBadRequest, "field messages must be an array")
	}
	var out []byte
	for i, msg := range msgs {
		if msg.Type() != fastjson.TypeObject {
			return nil, errorf(ErrBadRequest, "messages[%d] must be an object", i)
		}
		if err := treeUniqueKeys(msg, fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
		out = append(out, msg.GetStringBytes("role")...)
		out = append(out, '\n')
		if out, err = treeAppendContent(out, msg.Get("content"), i); err != nil {
			return nil, err
		}
		out = append(out, '\n')
	}
	return out, nil
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
			if part.Type() == fastjson.TypeObject {
				if err := treeUniqueKeys(part, fmt.Sprintf("messages[%d].content[%d]", msg, j)); err != nil {
					return nil, err
				}
			}
			out = append(out, part.GetStringBytes("text")...)
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
		return errorf(ErrBadRequest, "%s names the key %q twice", where, dup)
	}
	return nil
}
