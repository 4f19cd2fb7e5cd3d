package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"sync"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
)

// The routing text of a request is the prompt's real prefix in the order
// engines render it: the tools first, then the system prompt, then the
// messages with their tool calls and results, content parts in order. A
// body names its fields in any order (the SDKs send tools and system after
// the messages), so the text is rendered in sections, each where its field
// is read, in one pass over the body, and the sections are put in the
// engines' order when the text is handed out (pieces).

// RoutingText holds one request's routing text (inference.text): the
// bytes rendered, the strings left in the body, and the pieces they make.
// An exchange takes one from textBuffers and returns it when it is done,
// so that reading a body allocates nothing per byte of it.
type RoutingText struct {
	rendered []byte
	holes    []hole
	pieces   affinity.Text
	// uses are the tool_use ids of an Anthropic message and of the one
	// before it, which its tool_results must name (tooluses.go).
	uses toolUses
	// calls are the tool calls of a chat message (chattext.go).
	calls []callSpan
}

var textBuffers = sync.Pool{New: func() any { return &RoutingText{rendered: make([]byte, 0, 8<<10)} }}

// TakeText is a RoutingText for one reading of a body, from a pool: give
// it back with ReleaseText once nothing reads the text it holds.
func TakeText() *RoutingText { return textBuffers.Get().(*RoutingText) }

// maxPooledText is the largest buffer kept for reuse: a rare huge prompt
// should not pin its memory in the pool.
const maxPooledText = 1 << 20

func ReleaseText(t *RoutingText) {
	if t == nil || cap(t.rendered) > maxPooledText {
		return
	}
	clear(t.holes) // nothing pooled keeps a body
	clear(t.pieces)
	t.uses.reset()
	t.rendered, t.holes, t.pieces = t.rendered[:0], t.holes[:0], t.pieces[:0]
	textBuffers.Put(t)
}

// rendering is the routing text of one body as it is rendered: the body,
// the bytes rendered and the strings left in the body, in sections, and
// the state its readers keep from one message to the next.
type rendering struct {
	ep    *Endpoint
	b     []byte
	text  []byte // the routing text's rendered bytes
	holes []hole // its strings left in the body
	// sections are where each part of the routing text was rendered.
	sections [numSections]section
	uses     toolUses   // tool_use ids of the message before and of this one (Anthropic)
	calls    []callSpan // the tool calls of the chat message being read
}

// sectionKind is a part of the routing text, in the order engines render
// a prompt.
type sectionKind int

const (
	sectionTools    sectionKind = iota // the tools the request declares
	sectionSystem                      // Anthropic's top-level system prompt
	sectionMessages                    // the messages, or the prompt, input, query...
	numSections
)

// section is where a part of the routing text was rendered: its bytes and
// the strings left in the body among them.
type section struct {
	start, end       int // text[start:end]
	holeFrom, holeTo int // holes[holeFrom:holeTo]
	set              bool
}

// open starts rendering section k, which is rendered in one go, up to
// close. A section opened again goes on where it stopped (SGLang's
// generate renders input_ids and then text, one after the other).
func (r *rendering) open(k sectionKind) {
	if !r.sections[k].set {
		r.sections[k] = section{start: len(r.text), holeFrom: len(r.holes), set: true}
	}
}

func (r *rendering) close(k sectionKind) {
	s := &r.sections[k]
	s.end, s.holeTo = len(r.text), len(r.holes)
}

// minLeftInBody is the length from which a string without escapes is left
// in the body rather than copied into the routing text: the text's blocks
// are hashed where they lie, and only a block across two pieces is copied.
const minLeftInBody = 1024

// appendString appends the contents of the raw string raw (still escaped)
// to the routing text: a long one without escapes stays in the body, as a
// piece of its own; any other is unescaped into the rendered bytes.
func (r *rendering) appendString(raw []byte) {
	n := bytes.IndexByte(raw, '\\')
	switch {
	case n < 0 && len(raw) >= minLeftInBody:
		r.holes = append(r.holes, hole{at: len(r.text), raw: raw})
	case n < 0:
		r.text = append(r.text, raw...)
	default:
		r.text = jsonAppendUnescaped(append(r.text, raw[:n]...), raw[n:])
	}
}

// appendStringAt appends the string at s to the routing text; nothing when
// s holds no string.
func (r *rendering) appendStringAt(s span) {
	if r.isString(s) {
		r.appendString(r.b[s.start+1 : s.end-1])
	}
}

// isString reports whether s holds a string.
func (r *rendering) isString(s span) bool { return s.present() && r.b[s.start] == '"' }

// isObject reports whether s holds an object.
func (r *rendering) isObject(s span) bool { return s.present() && r.b[s.start] == '{' }

// appendDigest appends a stand-in for the media (an image, a sound, a file)
// whose bytes or address are the string at s: its kind and the xxh3 of the
// string, unescaped. The same image sent again, by the same URL or bytes,
// renders the same; any other does not. An engine's prompt holds the
// media's tokens where the routing text holds its digest.
func (r *rendering) appendDigest(kind string, s span) {
	raw := r.b[s.start+1 : s.end-1]
	var h uint64
	if hasBackslash(raw) {
		n := len(r.text) // the rendered bytes' tail is the scratch space
		r.text = jsonAppendUnescaped(r.text, raw)
		h = xxh3.Hash(r.text[n:])
		r.text = r.text[:n]
	} else {
		h = xxh3.Hash(raw)
	}
	r.text = appendMedia(r.text, kind, h)
}

// appendMedia appends the stand-in of a medium of kind whose digest is h:
// "<kind:16 hex digits>".
func appendMedia(dst []byte, kind string, h uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h)
	dst = append(append(append(dst, '<'), kind...), ':')
	return append(hex.AppendEncode(dst, b[:]), '>')
}

// appendCompact appends the JSON value at s as written, less the
// whitespace between its tokens.
func (r *rendering) appendCompact(s span) {
	r.text = jsonAppendCompact(r.text, r.b, s.start, s.end)
}

// hole is a string left in the body: it comes in the routing text before
// the rendered byte at.
type hole struct {
	at  int
	raw []byte
}

// pieces appends the routing text to dst, section by section in the
// engines' order: the rendered bytes, cut where the strings left in the
// body go.
func (r *rendering) pieces(dst affinity.Text) affinity.Text {
	for _, s := range r.sections {
		if !s.set {
			continue
		}
		at := s.start
		for _, h := range r.holes[s.holeFrom:s.holeTo] {
			if h.at > at {
				dst = append(dst, r.text[at:h.at])
			}
			dst, at = append(dst, h.raw), h.at
		}
		if s.end > at {
			dst = append(dst, r.text[at:s.end])
		}
	}
	return dst
}
