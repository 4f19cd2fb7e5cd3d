package wire

import (
	"bytes"
	"fmt"
)

// The routing text of Anthropic's Messages API (/v1/messages and its
// count_tokens), in the order engines render the prompt:
//
//	tools\n{tool as JSON}\n...                    the tools, when there are any
//	system\n{system text}\n                       the system prompt, when there is one
//	role\n{blocks in order}\n                     each message
//
// where a text block is its text, an image its digest (appendDigest), a
// tool_use "<tool_call:name>{input}</tool_call>" (no input, or null, is
// {}: vLLM takes it so, and some engines answer so) and a tool_result
// "<tool_result>{its text and images}</tool_result>". A system block that
// starts with x-anthropic-billing-header is left out: Claude Code puts a
// hash of each request there, and vLLM leaves it out of the prompt for
// that reason, so it would only make every request's prefix its own.
//
// The route reads strictly, as Anthropic's API does: a block that is not
// an object or names no type, a text block without text, an image without
// its source, a tool_use without id and name or with an input that is not
// an object, a tool_result that
// answers no tool_use of the message before it are refused with a 400,
// and nothing is forwarded that the router could not read. A block of a
// type the router does not know (thinking, document, a server tool's, the
// next one Anthropic adds) goes to the engine unchanged, and is left out
// of the routing text: the engine is the judge of the types it supports,
// and a router that refused new ones would break clients the day they
// ship.

// anthropicReader renders the system prompt and the messages of a
// Messages API request.
type anthropicReader struct{ *rendering }

// system renders Anthropic's system prompt, the value at vs: a string, or
// text blocks, rendered in the system section.
func (r anthropicReader) system(vs int) (int, error) {
	ve, err := jsonSkipValue(r.b, vs, 1)
	if err != nil {
		return ve, err
	}
	switch r.b[vs] {
	case 'n':
		return ve, nil
	case '"', '[':
	default:
		return ve, Errorf(ErrBadRequest, "field system must be a string or an array of text blocks")
	}
	r.open(sectionSystem)
	defer r.close(sectionSystem)
	start, holes := len(r.text), len(r.holes)
	r.text = append(r.text, "system\n"...)
	header := len(r.text)
	if r.b[vs] == '"' {
		r.appendStringAt(span{vs, ve})
	} else if err := r.systemBlocks(vs); err != nil {
		return ve, err
	}
	if len(r.text) == header && len(r.holes) == holes {
		r.text = r.text[:start] // no system text: none rendered, as engines render none
		return ve, nil
	}
	r.text = append(r.text, '\n')
	return ve, nil
}

// billingHeader starts the system block Claude Code stamps with a hash of
// each request.
var billingHeader = []byte("x-anthropic-billing-header")

// systemBlocks renders the text blocks of the system prompt, the array at
// vs.
func (r anthropicReader) systemBlocks(vs int) error {
	i := -1
	_, err := jsonEachElement(r.b, vs, 2, func(bs int) (int, error) {
		i++
		where := func() string { return fmt.Sprintf("system[%d]", i) }
		if r.b[bs] != '{' {
			be, err := jsonSkipValue(r.b, bs, 2)
			if err != nil {
				return be, err
			}
			return be, Errorf(ErrBadRequest, "%s must be a text block", where())
		}
		var f [numBlockFields]span
		be, err := r.fields(bs, 3, blockFields, f[:], where)
		if err != nil {
			return be, err
		}
		if !r.stringIs(f[blockType], "text") || !r.isString(f[blockText]) {
			return be, Errorf(ErrBadRequest, "%s must be a text block, with its text", where())
		}
		if !bytes.HasPrefix(r.b[f[blockText].start+1:], billingHeader) {
			r.appendStringAt(f[blockText])
		}
		return be, nil
	})
	return err
}

// anthropicMessages renders the messages of a Messages API request, the
// array at vs: each message is its role, its blocks and a newline.
func (r anthropicReader) messages(vs int) (int, error) {
	return r.eachMessage(vs, r.message)
}

// anthropicMessage renders messages[n], which starts at ms: its role, a
// newline, its content and a newline. The content is rendered as it is
// read, in the one walk of the message; when the message names its role
// after its content (the Go SDK writes "content" first), the role is put
// before the content once it is read.
func (r anthropicReader) message(ms, n int) (int, error) {
	where := func() string { return fmt.Sprintf("messages[%d]", n) }
	if ms >= len(r.b) || r.b[ms] != '{' {
		me, err := jsonSkipValue(r.b, ms, 2)
		if err != nil {
			return me, err
		}
		return me, Errorf(ErrBadRequest, "%s must be an object", where())
	}
	r.uses.turn()
	var role span
	start, holes := len(r.text), len(r.holes)
	placed, read := false, false
	me, err := r.fieldsWith(ms, 3, nil, nil, where, func(key []byte, vs int) (int, bool, error) {
		switch string(key) {
		case "role":
			ve, err := jsonSkipValue(r.b, vs, 3)
			if role = (span{vs, ve}); err == nil && !read && r.isString(role) {
				r.text = append(jsonAppendUnescaped(r.text, r.b[vs+1:ve-1]), '\n')
				placed, start, holes = true, len(r.text), len(r.holes)
			}
			return ve, true, err
		case "content":
			read = true
			ve, err := r.content(vs, n, where)
			return ve, true, err
		}
		return 0, false, nil
	})
	switch {
	case err != nil:
		return me, err
	case !r.isString(role):
		return me, Errorf(ErrBadRequest, "%s.role must be a string", where())
	case !read:
		return me, Errorf(ErrBadRequest, "%s.content must be a string or an array of content blocks", where())
	}
	if !placed {
		r.insertRole(role, start, holes)
	}
	r.text = append(r.text, '\n')
	return me, nil
}

// insertRole puts role and a newline at start, before the content rendered
// since; the content's strings left in the body (holes on) move with it.
func (r *rendering) insertRole(role span, start, holes int) {
	end := len(r.text)
	r.text = append(jsonAppendUnescaped(r.text, r.b[role.start+1:role.end-1]), '\n')
	var small [32]byte
	head := append(small[:0], r.text[end:]...)
	copy(r.text[start+len(head):], r.text[start:end])
	copy(r.text[start:], head)
	for i := holes; i < len(r.holes); i++ {
		r.holes[i].at += len(head)
	}
}

// anthropicContent renders the content of messages[n], the value at vs: a
// string, or content blocks.
func (r anthropicReader) content(vs, n int, where func() string) (int, error) {
	if vs < len(r.b) && r.b[vs] == '[' {
		return r.blocks(vs, 4, n, false)
	}
	raw, ve, ok, err := jsonString(r.b, vs, 3)
	if err == nil && !ok {
		err = Errorf(ErrBadRequest, "%s.content must be a string or an array of content blocks", where())
	}
	if err == nil {
		r.appendString(raw)
	}
	return ve, err
}

// The members of a content block the routing text reads.
var blockFields = []string{"type", "text", "source", "id", "name", "input", "tool_use_id", "content"}

const (
	blockType = iota
	blockText
	blockSource
	blockID
	blockName
	blockInput
	blockToolUseID
	blockContent
	numBlockFields
)

// blocks renders the content blocks of messages[n], the array at bs whose
// depth is depth, and returns the index just past it. Blocks within a
// tool_result (nested) are its text and images; other types there are left
// out.
func (r anthropicReader) blocks(bs, depth, n int, nested bool) (int, error) {
	i := -1
	return jsonEachElement(r.b, bs, depth, func(es int) (int, error) {
		i++
		return r.block(es, depth+1, n, i, nested)
	})
}

// block renders one content block, the object at bs (at depth depth), the
// i-th of messages[n] (or of a tool_result of it, when nested).
func (r anthropicReader) block(bs, depth, n, i int, nested bool) (int, error) {
	where := func() string {
		if nested {
			return fmt.Sprintf("messages[%d] tool_result content[%d]", n, i)
		}
		return fmt.Sprintf("messages[%d].content[%d]", n, i)
	}
	if bs >= len(r.b) || r.b[bs] != '{' {
		be, err := jsonSkipValue(r.b, bs, depth)
		if err != nil {
			return be, err
		}
		return be, Errorf(ErrBadRequest, "%s must be an object", where())
	}
	var f [numBlockFields]span
	be, err := r.fields(bs, depth, blockFields, f[:], where)
	if err != nil {
		return be, err
	}
	if !r.isString(f[blockType]) {
		return be, Errorf(ErrBadRequest, "%s must name its type", where())
	}
	switch {
	case r.stringIs(f[blockType], "text"):
		if !r.isString(f[blockText]) {
			return be, Errorf(ErrBadRequest, "%s is a text block without text", where())
		}
		r.appendStringAt(f[blockText])
	case r.stringIs(f[blockType], "image"):
		err = r.imageSource(f[blockSource], depth+1, where)
	case nested:
		// Anything else within a tool_result is left out.
	case r.stringIs(f[blockType], "tool_use"):
		err = r.toolUse(f, where)
	case r.stringIs(f[blockType], "tool_result"):
		err = r.toolResult(f, depth, n, where)
	}
	return be, err
}

// The members of an image's source the routing text reads.
var sourceFields = []string{"type", "data", "url", "file_id"}

// imageSource renders an image by its source, the object at s: the digest
// of its data (base64), its URL or its file id. A source of another type
// goes to the engine and is left out.
func (r anthropicReader) imageSource(s span, depth int, where func() string) error {
	if !r.isObject(s) {
		return Errorf(ErrBadRequest, "%s is an image without its source object", where())
	}
	var f [4]span
	if _, err := r.fields(s.start, depth, sourceFields, f[:], where); err != nil {
		return err
	}
	var v span
	switch {
	case r.stringIs(f[0], "base64"):
		v = f[1]
	case r.stringIs(f[0], "url"):
		v = f[2]
	case r.stringIs(f[0], "file"):
		v = f[3]
	case !r.isString(f[0]):
		return Errorf(ErrBadRequest, "%s is an image whose source names no type", where())
	default:
		return nil
	}
	if !r.isString(v) {
		return Errorf(ErrBadRequest, "%s is an image whose %s source lacks its value", where(), r.b[f[0].start+1:f[0].end-1])
	}
	r.appendDigest("image", v)
	return nil
}

// toolUse renders a tool_use block whose members are f, and records its id
// for the tool_results of the next message.
func (r anthropicReader) toolUse(f [numBlockFields]span, where func() string) error {
	if !r.isString(f[blockID]) || !r.isString(f[blockName]) {
		return Errorf(ErrBadRequest, "%s is a tool_use without a string id and name", where())
	}
	input := f[blockInput]
	switch {
	case !input.present() || r.b[input.start] == 'n':
		input = span{} // no input is none, {}, as vLLM takes it
	case !r.isObject(input):
		return Errorf(ErrBadRequest, "%s is a tool_use whose input is not an object", where())
	}
	r.appendCall(f[blockName], input)
	r.uses.add(r.b[f[blockID].start+1 : f[blockID].end-1])
	return nil
}

// toolResult renders a tool_result block whose members are f, at depth
// depth in messages[n]: its content, a string or text and image blocks.
func (r anthropicReader) toolResult(f [numBlockFields]span, depth, n int, where func() string) error {
	id := f[blockToolUseID]
	if !r.isString(id) {
		return Errorf(ErrBadRequest, "%s is a tool_result without a string tool_use_id", where())
	}
	if !r.uses.answers(r.b[id.start+1 : id.end-1]) {
		return Errorf(ErrBadRequest, "%s is the result of tool_use %s, which the message before it does not call",
			where(), r.b[id.start:id.end])
	}
	r.text = append(r.text, "<tool_result>"...)
	switch c := f[blockContent]; {
	case !c.present(), r.b[c.start] == 'n':
	case r.isString(c):
		r.appendStringAt(c)
	case r.b[c.start] == '[':
		if _, err := r.blocks(c.start, depth+1, n, true); err != nil {
			return err
		}
	default:
		return Errorf(ErrBadRequest, "%s is a tool_result whose content is not a string or an array of blocks", where())
	}
	r.text = append(r.text, "</tool_result>"...)
	return nil
}

// stringIs reports whether the string at s is want, escapes read.
func (r *rendering) stringIs(s span, want string) bool {
	if !r.isString(s) {
		return false
	}
	raw := r.b[s.start+1 : s.end-1]
	if !hasBackslash(raw) {
		return string(raw) == want
	}
	return string(jsonAppendUnescaped(nil, raw)) == want
}

// metadataFields is the member of Anthropic's metadata the router reads:
// the user's id, the consistent_hash key of the body.
var metadataFields = []string{"user_id"}

// metadata reads metadata.user_id, the object at vs, as the request's
// session key. Anything else there is the engine's to judge.
func (r *bodyReader) metadata(vs int) (int, error) {
	if vs >= len(r.b) || r.b[vs] != '{' {
		return jsonSkipValue(r.b, vs, 1)
	}
	var f [1]span
	ve, err := r.fields(vs, 2, metadataFields, f[:], func() string { return "metadata" })
	r.session[2] = f[0]
	return ve, err
}
