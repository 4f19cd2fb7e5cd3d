package proxy

import (
	"bytes"
	"fmt"
	"sync/atomic"

	"github.com/valyala/fastjson"
)

// splice stands between a resumable stream's workers and its client: it
// passes on whole SSE events only, so that a worker cut in the middle of an
// event leaves the client between two; it keeps the text the events
// carried, to continue the generation elsewhere (resume.go); and once the
// stream resumed on another worker it rewrites that worker's events as the
// first one's: its id and created, no second role delta, and the usage of
// the whole generation. It is used by the relay's goroutine only.
type splice struct {
	kind    resumeKind
	partial []byte // the current worker's event not yet whole
	out     []byte // whole events for the client
	text    []byte // the text generated so far
	tokens  int    // tokens generated so far, over every worker: a chunk of text each
	before  int    // of those, the tokens the workers before the current one generated
	sent    int    // bytes of out the client was handed
	resumes int    // times the stream resumed after a failure or a drain (--migration-limit)
	// workers counts the workers' answers the stream was made of, less
	// one: more than zero once it resumed, for whatever reason.
	workers int

	id       []byte // the first worker's response id and created: the client's
	created  int64
	hasHead  bool
	finished bool // a finish_reason came: the generation is whole
	// engineFailed: the current worker sent an error event, held back; its
	// stream is over.
	engineFailed bool
	// refused says why the stream cannot resume any more (nil: it can);
	// from then on the splice passes bytes on as they come.
	refused error

	limit  int           // bytes of text kept at most (--migration-buffer-bytes)
	budget *spliceBudget // the replica's bound over every stream's text
	held   int           // bytes of text taken from budget
	// bodyHeld is the request body's bytes taken from budget: the body is
	// kept to write the continuation with (newSplice).
	bodyHeld int

	parser fastjson.Parser
	arena  fastjson.Arena
}

// maxPartialEvent bounds an event the splice waits to see whole: an engine
// that never ends its events is passed on as it comes.
const maxPartialEvent = 256 << 10

// spliceBudget bounds the bytes of generated text every stream of a replica
// keeps at once (--migration-buffer-total-bytes).
type spliceBudget struct {
	limit int64
	used  atomic.Int64
}

func (b *spliceBudget) take(n int) bool {
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *spliceBudget) give(n int) { b.used.Add(-int64(n)) }

// feed takes the next bytes of the current worker's stream.
func (s *splice) feed(b []byte) {
	switch {
	case s.refused != nil:
		s.out = append(s.out, b...)
		return
	case s.engineFailed:
		return // what a failed worker sends after its error event
	}
	s.partial = append(s.partial, b...)
	rest := s.partial
	for !s.engineFailed && s.refused == nil {
		i := bytes.Index(rest, eventEnd)
		if i < 0 {
			break
		}
		s.event(rest[:i+len(eventEnd)])
		rest = rest[i+len(eventEnd):]
	}
	switch {
	case s.engineFailed:
		s.partial = s.partial[:0]
	case s.refused != nil:
		s.out = append(s.out, rest...)
		s.partial = s.partial[:0]
	default:
		s.partial = s.partial[:copy(s.partial, rest)]
		if len(s.partial) > maxPartialEvent {
			s.refuse(fmt.Errorf("%w: an event of more than %d bytes", errCannotResume, maxPartialEvent))
			s.out, s.partial = append(s.out, s.partial...), s.partial[:0]
		}
	}
}

var eventEnd = []byte("\n\n")

// event handles one whole event.
func (s *splice) event(ev []byte) {
	data, ok := eventData(ev)
	if !ok || string(data) == "[DONE]" {
		s.out = append(s.out, ev...)
		return
	}
	v, err := s.parser.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		s.out = append(s.out, ev...)
		return
	}
	if v.Get("error") != nil {
		s.engineFailed = true
		return
	}
	s.head(v)
	s.take(v)
	if s.workers == 0 || s.refused != nil {
		s.out = append(s.out, ev...)
		return
	}
	s.rewrite(v)
	s.out = append(v.MarshalTo(append(s.out, "data: "...)), eventEnd...)
}

// eventData is the payload of an event of one data line.
func eventData(ev []byte) ([]byte, bool) {
	line := bytes.TrimRight(ev, "\r\n")
	if !bytes.HasPrefix(line, []byte("data:")) || bytes.IndexByte(line, '\n') >= 0 {
		return nil, false
	}
	return bytes.TrimSpace(line[len("data:"):]), true
}

// head keeps the first worker's id and created: the client's.
func (s *splice) head(v *fastjson.Value) {
	if s.hasHead {
		return
	}
	s.id = append(s.id[:0], v.GetStringBytes("id")...)
	s.created, s.hasHead = v.GetInt64("created"), true
}

// take keeps the text of one chunk, and notes what forbids resuming: more
// than one choice, a tool call.
func (s *splice) take(v *fastjson.Value) {
	choices := v.GetArray("choices")
	switch {
	case len(choices) == 0:
		return
	case len(choices) > 1:
		s.refuse(fmt.Errorf("%w: more than one choice", errCannotResume))
		return
	}
	c := choices[0]
	text := c.GetStringBytes("text")
	if s.kind == resumeChat {
		d := c.Get("delta")
		if calls := d.Get("tool_calls"); calls != nil && calls.Type() != fastjson.TypeNull {
			s.refuse(fmt.Errorf("%w: a tool call", errCannotResume))
			return
		}
		text = d.GetStringBytes("content")
	}
	if f := c.Get("finish_reason"); f != nil && f.Type() != fastjson.TypeNull {
		s.finished = true
	}
	if len(text) > 0 {
		s.tokens++
		s.keep(text)
	}
}

// keep adds text to what was generated, within the stream's and the
// replica's bounds.
func (s *splice) keep(text []byte) {
	switch {
	case len(s.text)+len(text) > s.limit:
		s.refuse(fmt.Errorf("%w: more than --migration-buffer-bytes (%d) of text", errCannotResume, s.limit))
	case !s.budget.take(len(text)):
		s.refuse(fmt.Errorf("%w: the replica holds --migration-buffer-total-bytes of streams' text", errCannotResume))
	default:
		s.held += len(text)
		s.text = append(s.text, text...)
	}
}

// refuse makes the stream one that cannot resume, and gives its text back.
func (s *splice) refuse(why error) {
	if s.refused == nil {
		s.refused = why
	}
	s.release()
}

// release gives back the budget the stream's text took.
func (s *splice) release() {
	s.budget.give(s.held)
	s.held, s.text = 0, nil
}

// close gives back all the splice took of the budget, at the stream's end.
func (s *splice) close() {
	s.release()
	s.budget.give(s.bodyHeld)
	s.bodyHeld = 0
}

// rewrite makes a resumed worker's chunk the first worker's: its id and
// created, no role again, and the usage of the whole generation (the
// prompt once: the resumed engine's less the tokens it was given back;
// completion tokens summed; cached tokens as the engine said).
func (s *splice) rewrite(v *fastjson.Value) {
	a := &s.arena
	a.Reset()
	v.Set("id", a.NewStringBytes(s.id))
	if v.Get("created") != nil {
		v.Set("created", a.NewNumberString(fmt.Sprint(s.created)))
	}
	if choices := v.GetArray("choices"); len(choices) == 1 {
		if d := choices[0].Get("delta"); d != nil {
			d.Del("role")
		}
	}
	if u := v.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
		s.rewriteUsage(u, a)
	}
}

func (s *splice) rewriteUsage(u *fastjson.Value, a *fastjson.Arena) {
	prompt := max(u.GetInt("prompt_tokens")-s.before, 0)
	completion := u.GetInt("completion_tokens") + s.before
	u.Set("prompt_tokens", a.NewNumberInt(prompt))
	u.Set("completion_tokens", a.NewNumberInt(completion))
	u.Set("total_tokens", a.NewNumberInt(prompt+completion))
	if d := u.Get("prompt_tokens_details"); d != nil && d.Get("cached_tokens") != nil {
		d.Set("cached_tokens", a.NewNumberInt(min(d.GetInt("cached_tokens"), prompt)))
	}
}

// canResume reports whether the stream may resume once more after a
// failure or a drain.
func (s *splice) canResume(limit int) bool {
	return s.resumable() && s.resumes < limit
}

// resumable reports whether the generation can be continued: its shape
// allows it and it has not finished.
func (s *splice) resumable() bool { return s.refused == nil && !s.finished }

// resumed readies the splice for the next worker's events.
func (s *splice) resumed() {
	s.before = s.tokens
	s.workers++
	s.partial = s.partial[:0]
	s.engineFailed = false
}
