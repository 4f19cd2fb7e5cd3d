package wire

import "fmt"

// The routing text of the OpenAI shapes (chat completions, and the
// Responses API's input items), as engines render them into the prompt:
//
//	tools\n{tool as JSON}\n...                       the tools, when there are any
//	role\ncontent<tool_call:name>arguments</tool_call>\n   each message
//
// where content is a string, or its parts in order: their text, and an
// image, a sound or a file by a digest of its URL or bytes (appendDigest).
// A tool's result is a message of its own (role tool) as engines take it.
// What engines leave out of the prompt is left out here: tool_choice (it
// steers decoding; vLLM does not hand it to the chat template, so an agent
// that forces a tool on one turn and not the next keeps its prefix), ids,
// and any part or field the router does not know.
//
// The chat route reads leniently, as it always has: a part that is not an
// object, a tool call without a name, a field of another type than
// expected add nothing to the text, and the engine judges the request.

// chatReader renders the messages of the OpenAI shapes: chat's messages,
// and the Responses API's input items.
type chatReader struct{ *rendering }

// maxTools bounds the tools one request declares. OpenAI's API takes 128;
// a body declaring thousands is a mistake or an attack, refused before the
// router renders and hashes them.
const maxTools = 1024

// tools renders the tools a request declares, the array at vs, into the
// tools section, each as its JSON compacted (engines render a tool's JSON
// into the prompt). Null or an empty array renders nothing: no tools.
func (r *bodyReader) tools(vs int) (int, error) {
	if vs < len(r.b) && r.b[vs] == 'n' {
		return jsonSkipValue(r.b, vs, 1)
	}
	if vs >= len(r.b) || r.b[vs] != '[' {
		ve, err := jsonSkipValue(r.b, vs, 1)
		if err != nil {
			return ve, err
		}
		return ve, Errorf(ErrBadRequest, "field tools must be an array of objects")
	}
	r.open(sectionTools)
	defer r.close(sectionTools)
	start := len(r.text)
	r.text = append(r.text, "tools\n"...)
	n := 0
	ve, err := jsonEachElement(r.b, vs, 2, func(ts int) (int, error) {
		if n++; n > maxTools {
			return ts, Errorf(ErrBadRequest, "field tools declares more than %d tools", maxTools)
		}
		if ts >= len(r.b) || r.b[ts] != '{' {
			te, err := jsonSkipValue(r.b, ts, 2)
			if err == nil {
				err = Errorf(ErrBadRequest, "tools[%d] must be an object", n-1)
			}
			return te, err
		}
		var te int
		var err error
		r.text, te, err = jsonCompactValue(r.text, r.b, ts, 2)
		r.text = append(r.text, '\n')
		return te, err
	})
	if n == 0 {
		r.text = r.text[:start]
	}
	return ve, err
}

// messages renders chat messages, the array at vs: each message is its
// role, its content, its tool calls and a newline (see message).
func (r chatReader) messages(vs int) (int, error) { return r.eachMessage(vs, r.message) }

// eachMessage reads the messages array at vs with message, which is given
// each message's start and index.
func (r *rendering) eachMessage(vs int, message func(ms, n int) (int, error)) (int, error) {
	if vs >= len(r.b) || r.b[vs] != '[' {
		ve, err := jsonSkipValue(r.b, vs, 1)
		if err != nil {
			return ve, err
		}
		return ve, Errorf(ErrBadRequest, "field messages must be an array")
	}
	n := 0
	return jsonEachElement(r.b, vs, 2, func(ms int) (int, error) {
		n++
		return message(ms, n-1)
	})
}

// The members of a chat message the routing text reads. arguments, name
// and output are those of the Responses API's function_call and
// function_call_output items, which stand among its messages.
var messageFields = []string{"role", "content", "function_call", "name", "arguments", "output"}

const (
	fieldRole = iota
	fieldContent
	fieldFunctionCall
	fieldName
	fieldArguments
	fieldOutput
)

// message renders messages[n], which starts at ms.
func (r chatReader) message(ms, n int) (int, error) {
	if ms >= len(r.b) || r.b[ms] != '{' {
		me, err := jsonSkipValue(r.b, ms, 2)
		if err != nil {
			return me, err
		}
		return me, Errorf(ErrBadRequest, "messages[%d] must be an object", n)
	}
	where := func() string { return fmt.Sprintf("messages[%d]", n) }
	var f [6]span
	r.calls = r.calls[:0]
	me, err := r.fieldsWith(ms, 3, messageFields, f[:], where, func(key []byte, vs int) (int, bool, error) {
		if string(key) != "tool_calls" {
			return 0, false, nil
		}
		ve, err := r.readToolCalls(vs, n)
		return ve, true, err
	})
	if err != nil {
		return me, err
	}
	r.appendStringAt(f[fieldRole])
	r.text = append(r.text, '\n')
	if err := r.content(f[fieldContent], n); err != nil {
		return me, err
	}
	if err := r.content(f[fieldOutput], n); err != nil {
		return me, err
	}
	if r.isString(f[fieldArguments]) { // a Responses API function_call item
		r.appendCall(f[fieldName], f[fieldArguments])
	}
	if r.isObject(f[fieldFunctionCall]) { // the legacy function call
		_, name, arguments, err := r.readFunction(f[fieldFunctionCall].start, 4, where)
		if err != nil {
			return me, err
		}
		r.appendCall(name, arguments)
	}
	for _, c := range r.calls {
		r.appendCall(c.name, c.arguments)
	}
	r.text = append(r.text, '\n')
	return me, nil
}

// content renders the content of messages[n]: a string, or each part of
// an array in order.
func (r chatReader) content(c span, n int) error {
	if !c.present() || r.b[c.start] != '[' {
		r.appendStringAt(c)
		return nil
	}
	part := -1
	_, err := jsonEachElement(r.b, c.start, 4, func(ps int) (int, error) {
		part++
		if r.b[ps] != '{' {
			return jsonSkipValue(r.b, ps, 4)
		}
		return r.contentPart(ps, n, part)
	})
	return err
}

// The members of a content part the routing text reads.
var partFields = []string{"text", "image_url", "input_audio", "file"}

// contentPart renders messages[n].content[part], the object at ps: its
// text, then its image, sound or file by digest.
func (r chatReader) contentPart(ps, n, part int) (int, error) {
	where := func() string { return fmt.Sprintf("messages[%d].content[%d]", n, part) }
	var f [4]span
	pe, err := r.fields(ps, 5, partFields, f[:], where)
	if err != nil {
		return pe, err
	}
	r.appendStringAt(f[0])
	if err := r.media("image", f[1], urlKey, where); err != nil {
		return pe, err
	}
	if err := r.media("audio", f[2], dataKey, where); err != nil {
		return pe, err
	}
	return pe, r.media("file", f[3], fileKeys, where)
}

// media renders the medium at s by digest: s is its URL or data itself, or
// an object whose first member of names that is a string is. Anything else
// adds nothing.
func (r chatReader) media(kind string, s span, names []string, where func() string) error {
	if r.isString(s) {
		r.appendDigest(kind, s)
		return nil
	}
	if !r.isObject(s) {
		return nil
	}
	var f [2]span
	if _, err := r.fields(s.start, 6, names, f[:len(names)], where); err != nil {
		return err
	}
	for _, v := range f[:len(names)] {
		if r.isString(v) {
			r.appendDigest(kind, v)
			return nil
		}
	}
	return nil
}

// The members media are read under: image_url.url, input_audio.data,
// file.file_data (else file.file_id).
var (
	urlKey   = []string{"url"}
	dataKey  = []string{"data"}
	fileKeys = []string{"file_data", "file_id"}
)

// callSpan is a tool call of the message being read: its function's name
// and arguments, rendered once the message is read.
type callSpan struct{ name, arguments span }

// readToolCalls reads the tool calls of messages[n], the value at vs, into
// r.calls, in the one walk of the message: each call's function's name
// and arguments. What is not an array of calls is skipped.
func (r chatReader) readToolCalls(vs, n int) (int, error) {
	if vs >= len(r.b) || r.b[vs] != '[' {
		return jsonSkipValue(r.b, vs, 3)
	}
	k := -1
	return jsonEachElement(r.b, vs, 4, func(cs int) (int, error) {
		k++
		if cs >= len(r.b) || r.b[cs] != '{' {
			return jsonSkipValue(r.b, cs, 4)
		}
		where := func() string { return fmt.Sprintf("messages[%d].tool_calls[%d]", n, k) }
		return r.fieldsWith(cs, 5, nil, nil, where, func(key []byte, fs int) (int, bool, error) {
			if string(key) != "function" || fs >= len(r.b) || r.b[fs] != '{' {
				return 0, false, nil
			}
			fe, name, arguments, err := r.readFunction(fs, 6, where)
			r.calls = append(r.calls, callSpan{name, arguments})
			return fe, true, err
		})
	})
}

// functionFields are the members of a function call the routing text
// reads.
var functionFields = []string{"name", "arguments"}

// readFunction reads the function of a call, the object at fs at depth
// depth: its name and arguments.
func (r chatReader) readFunction(fs, depth int, where func() string) (fe int, name, arguments span, err error) {
	var f [2]span
	fe, err = r.fields(fs, depth, functionFields, f[:], where)
	return fe, f[0], f[1], err
}

// appendCall appends a tool call: "<tool_call:name>arguments</tool_call>".
// The arguments are a string of JSON in the OpenAI shapes (rendered as
// it says), an object in Anthropic's (rendered compacted).
func (r *rendering) appendCall(name, arguments span) {
	r.text = append(r.text, "<tool_call:"...)
	r.appendStringAt(name)
	r.text = append(r.text, '>')
	switch {
	case r.isObject(arguments):
		r.appendCompact(arguments)
	case r.ep.Kind == KindMessages: // a tool_use without input
		r.text = append(r.text, "{}"...)
	default:
		r.appendStringAt(arguments)
	}
	r.text = append(r.text, "</tool_call>"...)
}

// fields reads the members of the object at os, at depth depth, into
// into: into[i] is the span of the member named names[i], zero when there
// is none. where names the object in the error of a key named twice, which
// is refused wherever the router reads (see keySet).
func (r *rendering) fields(os, depth int, names []string, into []span, where func() string) (int, error) {
	return r.fieldsWith(os, depth, names, into, where, nil)
}

// fieldsWith is fields whose members read reads in place of skipping them
// (it reports ok), so that the object is walked once: read is given the
// unescaped key and the start of the value, and returns the end of the
// value.
func (r *rendering) fieldsWith(os, depth int, names []string, into []span, where func() string,
	read func(key []byte, vs int) (ve int, ok bool, err error)) (int, error) {
	var keys keySet
	return jsonEachMember(r.b, os, depth, func(raw []byte, vs int) (int, error) {
		key, dup := keys.add(raw)
		if dup {
			return vs, duplicateKey(where(), key)
		}
		if read != nil {
			if ve, ok, err := read(key, vs); ok {
				return ve, err
			}
		}
		ve, err := jsonSkipValue(r.b, vs, depth)
		for i, name := range names {
			if string(key) == name {
				into[i] = span{vs, ve}
				break
			}
		}
		return ve, err
	})
}
