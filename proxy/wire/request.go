package wire

import (
	"bytes"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
)

// Inference is what the router reads from a request body: just enough to
// route it, without building a document tree of the whole body.
type Inference struct {
	Model  string
	Stream bool
	// Text is the routing text: the prompt, or each message rendered as
	// role + "\n" + content + "\n", in pieces (see appendString).
	Text affinity.Text
	// Session is the consistent-hash key of the body (user or session_id),
	// empty when neither is present.
	Session string
	// Previous is a Responses API request's previous_response_id: the
	// worker that stored that response must answer this one.
	Previous string
	// Salt is the request's cache_salt (completions, chat, messages): the
	// engine caches a salted prompt's blocks apart from everyone else's,
	// so the router matches them only with the same salt's. "" for none.
	Salt string
}

// Parse reads an inference request body in one pass (see
// jsonscan.go). The routing text goes into into (nil: a new one), and the
// result's text is its pieces, valid while into is not released and the
// body is unchanged.
func Parse(ep *Endpoint, body []byte, into *RoutingText) (Inference, error) {
	if into == nil {
		into = new(RoutingText)
	}
	r := bodyReader{rendering: rendering{ep: ep, b: body, text: into.rendered[:0], holes: into.holes[:0], calls: into.calls[:0],
		uses: into.uses}}
	defer func() { into.rendered, into.holes, into.calls, into.uses = r.text, r.holes, r.calls, r.uses }() // what they grew to
	// An earlier reading's ids answer nothing here.
	r.uses.reset()
	if err := r.read(); err != nil {
		return Inference{}, err
	}
	in, err := r.result()
	if err != nil {
		return Inference{}, err
	}
	in.Text = r.pieces(into.pieces[:0])
	into.pieces = in.Text
	return in, nil
}

// A body is read by four types, one per concern, over one rendering:
//
//   - bodyReader reads the top-level members, checks them and keeps the
//     spans of those it reads (model, stream, the session's, ...);
//   - chatReader renders the messages of the OpenAI shapes (chattext.go);
//   - anthropicReader renders the system prompt and the messages of
//     Anthropic's Messages API (anthropictext.go);
//   - rendering holds the body and the routing text rendered so far, in its
//     sections, and what every reader asks of both: the string at a span,
//     an object's members, a string appended to the text (routingtext.go).
//
// The readers of messages are made where a member names them, as values
// that point at the one rendering: reading a body allocates nothing for
// them.

// bodyReader is one reading of a body: the spans of the top-level fields,
// over the rendering of its routing text.
type bodyReader struct {
	rendering
	model   span
	stream  span
	session [3]span // session_id, user, metadata.user_id (Anthropic)
	found   bool    // the field of the routing text was present
	// The spans of the fields rendered only once the whole body is read
	// (their order in the text is not their order in the body).
	query, documents    span // rerank
	instructions, input span // the Responses API
	previous            span
	salt                span // cache_salt
}

// chat is the reader of r's messages in the OpenAI shapes.
func (r *bodyReader) chat() chatReader { return chatReader{&r.rendering} }

// anthropic is the reader of r's system prompt and messages in Anthropic's
// shape.
func (r *bodyReader) anthropic() anthropicReader { return anthropicReader{&r.rendering} }

// span is where a value is in the body; a zero span is a missing value.
type span struct{ start, end int }

func (s span) present() bool { return s.end > s.start }

func malformed(err error) error { return Errorf(ErrBadRequest, "malformed JSON body: %v", err) }

// read validates the body and renders the routing text of its messages or
// prompt.
func (r *bodyReader) read() error {
	i := jsonSkipWS(r.b, 0)
	if i >= len(r.b) || r.b[i] != '{' {
		end, err := jsonSkipValue(r.b, i, 0)
		if err == nil {
			err = r.tail(end)
		}
		if err != nil {
			return malformed(err)
		}
		return Errorf(ErrBadRequest, "the body must be a JSON object")
	}
	var keys keySet
	end, err := jsonEachMember(r.b, i, 1, func(raw []byte, vs int) (int, error) {
		key, dup := keys.add(raw)
		if dup {
			return vs, duplicateKey("the body", key)
		}
		return r.member(key, vs)
	})
	if err == nil {
		err = r.tail(end)
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	if err != nil {
		return malformed(err)
	}
	return nil
}

// tail refuses anything but whitespace after the top-level value.
func (r *bodyReader) tail(end int) error {
	if i := jsonSkipWS(r.b, end); i < len(r.b) {
		return syntaxErr(i, "unexpected data after the JSON value")
	}
	return nil
}

// member reads one top-level member, whose unescaped key is key. The
// routing text of completions, chat and messages, the hot path, is
// rendered as it is read, each field in its section; the other endpoints'
// fields are kept as spans for result.
func (r *bodyReader) member(key []byte, vs int) (int, error) {
	var dst *span
	switch k, kind := string(key), r.ep.Kind; {
	case k == "model":
		dst = &r.model
	case k == "stream":
		dst = &r.stream
	case k == "session_id":
		dst = &r.session[0]
	case k == "user":
		dst = &r.session[1]
	case k == "tools" && (kind == KindChat || kind == KindMessages):
		return r.tools(vs)
	case k == "messages" && kind == KindChat:
		r.found = true
		return r.inSection(sectionMessages, vs, r.chat().messages)
	case k == "messages" && kind == KindMessages:
		r.found = true
		return r.inSection(sectionMessages, vs, r.anthropic().messages)
	case k == "system" && kind == KindMessages:
		return r.anthropic().system(vs)
	case k == "metadata" && kind == KindMessages:
		return r.metadata(vs)
	case k == "prompt" && kind == KindCompletions, k == "input" && kind == KindEmbeddings,
		k == "text" && kind == KindGenerate, k == "input_ids" && kind == KindGenerate && !r.found:
		r.found = true
		field := promptField(kind, key)
		return r.inSection(sectionMessages, vs, func(vs int) (int, error) { return r.prompt(vs, field) })
	case k == "query" && kind == KindRerank:
		dst = &r.query
	case k == "documents" && kind == KindRerank:
		dst = &r.documents
	case k == "instructions" && kind == KindResponses:
		dst = &r.instructions
	case k == "input" && kind == KindResponses:
		dst = &r.input
	case k == "previous_response_id" && kind == KindResponses:
		dst = &r.previous
	case k == "cache_salt" && (kind == KindCompletions || kind == KindChat || kind == KindMessages):
		dst = &r.salt
	}
	ve, err := jsonSkipValue(r.b, vs, 1)
	if dst != nil {
		*dst = span{vs, ve}
	}
	return ve, err
}

// promptField names the prompt field key of an endpoint of kind, for its
// errors: a constant, so that reading a body's keys allocates nothing (a
// key kept as a string past the switch would be copied to the heap, for
// every member of every body).
func promptField(kind Kind, key []byte) string {
	switch {
	case kind == KindCompletions:
		return "prompt"
	case kind == KindEmbeddings:
		return "input"
	case string(key) == "text":
		return "text"
	}
	return "input_ids"
}

// inSection renders the value at vs with render, in section k.
func (r *bodyReader) inSection(k sectionKind, vs int, render func(vs int) (int, error)) (int, error) {
	r.open(k)
	defer r.close(k)
	return render(vs)
}

// render renders the routing text of the endpoints whose fields were kept
// as spans: rerank's query and then its documents, the Responses API's
// instructions and then its input.
func (r *bodyReader) render() error {
	switch r.ep.Kind {
	case KindRerank:
		r.open(sectionMessages)
		defer r.close(sectionMessages)
		return r.renderRerank()
	case KindResponses:
		r.open(sectionMessages)
		defer r.close(sectionMessages)
		return r.renderResponses()
	}
	return nil
}

func (r *bodyReader) renderRerank() error {
	if !r.query.present() || r.b[r.query.start] != '"' {
		return Errorf(ErrBadRequest, "missing required field: query (a string)")
	}
	if !r.documents.present() || r.b[r.documents.start] != '[' {
		return Errorf(ErrBadRequest, "field documents must be an array")
	}
	r.found = true
	r.appendStringAt(r.query)
	r.text = append(r.text, '\n')
	_, err := jsonEachElement(r.b, r.documents.start, 2, func(ds int) (int, error) {
		de, err := jsonSkipValue(r.b, ds, 2)
		if err != nil {
			return de, err
		}
		if r.b[ds] == '{' {
			return de, r.partText(ds, 3, "documents")
		}
		r.appendStringAt(span{ds, de})
		r.text = append(r.text, '\n')
		return de, nil
	})
	return err
}

// partText appends the "text" of the object at os, then a newline.
func (r *bodyReader) partText(os, depth int, where string) error {
	var keys keySet
	_, err := jsonEachMember(r.b, os, depth, func(raw []byte, vs int) (int, error) {
		key, dup := keys.add(raw)
		if dup {
			return vs, duplicateKey(where, key)
		}
		ve, err := jsonSkipValue(r.b, vs, depth)
		if err == nil && string(key) == "text" {
			r.appendStringAt(span{vs, ve})
		}
		return ve, err
	})
	r.text = append(r.text, '\n')
	return err
}

func (r *bodyReader) renderResponses() error {
	if !r.input.present() {
		return Errorf(ErrBadRequest, "missing required field: input")
	}
	r.found = true
	r.appendStringAt(r.instructions)
	switch r.b[r.input.start] {
	case '"':
		r.appendStringAt(r.input)
		return nil
	case '[':
		_, err := r.chat().messages(r.input.start)
		return err
	}
	return Errorf(ErrBadRequest, "field input must be a string or an array")
}

// result checks the fields and returns what was read.
func (r *bodyReader) result() (Inference, error) {
	var in Inference
	var ok bool
	if in.Model, ok = r.str(r.model); !ok {
		return Inference{}, Errorf(ErrBadRequest, "field model must be a string")
	}
	if in.Model == "" && r.ep.NeedsModel {
		return Inference{}, Errorf(ErrBadRequest, "missing required field: model")
	}
	if err := checkModelName(in.Model); err != nil {
		return Inference{}, err
	}
	if s := r.stream; s.present() {
		switch v := string(r.b[s.start:s.end]); v {
		case "true", "false":
			in.Stream = v == "true"
		default:
			return Inference{}, Errorf(ErrBadRequest, "field stream must be a boolean")
		}
	}
	for _, s := range r.session {
		if in.Session, _ = r.str(s); in.Session != "" {
			break
		}
	}
	var ok2 bool
	if in.Previous, ok2 = r.str(r.previous); !ok2 {
		return Inference{}, Errorf(ErrBadRequest, "field previous_response_id must be a string")
	}
	var err error
	if in.Salt, err = r.cacheSalt(); err != nil {
		return Inference{}, err
	}
	if err := r.render(); err != nil {
		return Inference{}, err
	}
	if !r.found {
		return Inference{}, Errorf(ErrBadRequest, "missing required field: %s", r.ep.TextField)
	}
	return in, nil
}

// maxModelName bounds the length of a model's name.
const maxModelName = 512

// checkModelName refuses a model name that could be read as a path outside
// the models' own: engines resolve an adapter's name to a directory (vLLM's
// LoRA resolvers), so a "." or ".." segment, a backslash or a control
// character must not reach them. A name that is a path, as vLLM names a
// model served from one (/models/llama), is a name like any other.
func checkModelName(model string) error {
	bad := len(model) > maxModelName
	for i := 0; i < len(model) && !bad; i++ {
		bad = model[i] < ' ' || model[i] == 0x7f || model[i] == '\\'
	}
	for rest := model; rest != "" && !bad; {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		bad = seg == "." || seg == ".."
	}
	if bad {
		return Errorf(ErrBadRequest, "field model is not a model's name: at most %d bytes, no '.' or '..' path segment, "+
			"backslash or control character", maxModelName)
	}
	return nil
}

// MaxCacheSalt bounds a cache_salt's length: a tenant's name or a digest
// of one is tens of bytes, and the salt is hashed with every request.
const MaxCacheSalt = 1024

// cacheSalt is the body's cache_salt: absent or null is none; anything
// else must be a non-empty string (vLLM refuses an empty one) within
// MaxCacheSalt bytes.
func (r *bodyReader) cacheSalt() (string, error) {
	if r.salt.end-r.salt.start > 2+6*MaxCacheSalt { // too long however it is escaped: not copied to be refused
		return "", Errorf(ErrBadRequest, "field cache_salt must be a non-empty string of at most %d bytes", MaxCacheSalt)
	}
	salt, ok := r.str(r.salt)
	if !ok || (salt == "" && r.salt.present() && string(r.b[r.salt.start:r.salt.end]) != "null") || len(salt) > MaxCacheSalt {
		return "", Errorf(ErrBadRequest, "field cache_salt must be a non-empty string of at most %d bytes", MaxCacheSalt)
	}
	return salt, nil
}

// str is the unescaped string at s: "" for a missing value or null, ok
// false for another type.
func (r *rendering) str(s span) (string, bool) {
	if !s.present() {
		return "", true
	}
	switch v := r.b[s.start:s.end]; {
	case v[0] == '"' && !hasBackslash(v):
		return string(v[1 : len(v)-1]), true
	case v[0] == '"':
		return string(jsonAppendUnescaped(nil, v[1:len(v)-1])), true
	case string(v) == "null":
		return "", true
	}
	return "", false
}

// prompt renders a completions prompt (or embeddings' input, or
// generate's text or input_ids, all of the same shape): a string, or an
// array whose strings are concatenated and whose other items (token ids)
// are added as their JSON text.
func (r *bodyReader) prompt(vs int, field string) (int, error) {
	if vs < len(r.b) && r.b[vs] != '[' {
		raw, ve, ok, err := jsonString(r.b, vs, 1)
		switch {
		case err != nil:
			return ve, err
		case !ok:
			return ve, Errorf(ErrBadRequest, "field %s must be a string or an array", field)
		}
		r.appendString(raw)
		return ve, nil
	}
	if vs >= len(r.b) {
		return jsonSkipValue(r.b, vs, 1)
	}
	return jsonEachElement(r.b, vs, 2, func(is int) (int, error) {
		raw, ie, ok, err := jsonString(r.b, is, 2)
		if err == nil {
			if ok {
				r.appendString(raw)
			} else {
				r.text = jsonAppendCompact(r.text, r.b, is, ie)
			}
		}
		return ie, err
	})
}

// keySet finds a key named twice in one object. fastjson (and so the
// router, before it read bodies itself) reads the first of two such keys
// and the engines' JSON parsers the last, so the router would route (and
// count, and check) another request than the one the worker answers: such
// a body is refused.
type keySet struct {
	small [16][]byte
	n     int
	many  map[string]struct{} // past 16 keys, so a stranger's huge object costs linear time
}

// add records the raw key of a member of an object, and returns it
// unescaped; dup reports that the object named it before.
func (s *keySet) add(raw []byte) (key []byte, dup bool) {
	key = raw
	if hasBackslash(raw) {
		key = jsonAppendUnescaped(nil, raw)
	}
	if s.many != nil {
		if _, ok := s.many[string(key)]; ok {
			return key, true
		}
		s.many[string(key)] = struct{}{}
		return key, false
	}
	for _, k := range s.small[:s.n] {
		if string(k) == string(key) {
			return key, true
		}
	}
	s.small[s.n] = key
	if s.n++; s.n == len(s.small) {
		s.many = make(map[string]struct{}, 2*len(s.small))
		for _, k := range s.small {
			s.many[string(k)] = struct{}{}
		}
	}
	return key, false
}

func duplicateKey(where string, key []byte) error {
	return Errorf(ErrBadRequest, "%s names the key %q twice", where, key)
}

func hasBackslash(b []byte) bool { return bytes.IndexByte(b, '\\') >= 0 }

// SessionKey is the consistent_hash key: the X-Session-ID header, else the
// body's session_id or user, else the whole body.
func SessionKey(header []byte, in Inference, body []byte) uint64 {
	switch {
	case len(header) > 0:
		return xxh3.Hash(header)
	case in.Session != "":
		return xxh3.HashString(in.Session)
	}
	return xxh3.Hash(body)
}
