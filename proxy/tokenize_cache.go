package proxy

import (
	"container/list"
	"encoding/json"
	"sync"

	"github.com/kvrouter/kvrouter/proxy/wire"
	"github.com/valyala/fastjson"
	"github.com/zeebo/xxh3"
)

// promptChunk is the stride, in bytes, at which a completion's prompt is
// marked for the cache: a continuation finds an earlier prompt it starts
// with by the mark of the earlier prompt's last whole chunk.
const promptChunk = 256

// prompt is a request's /tokenize body and the keys the token cache knows
// it and its prefixes by.
type prompt struct {
	body []byte
	// full names the whole prompt, with its model.
	full uint64
	// marks name its prefixes at its boundaries, shortest first: a chat's
	// messages up to each one; a completion's model alone, then its whole
	// chunks of promptChunk bytes. An entry is stored under the last mark
	// of its own prompt.
	marks []uint64
	// text is a completion's prompt, for checking that a prefix found by
	// its mark is one (nil for a chat, whose marks name whole messages).
	text []byte
}

// tokenizeRequest reads a client's body into vLLM's /tokenize request:
// {"model", "messages", "tools"} for a chat (the template applied with the
// generation prompt and the tools, as the chat endpoint applies it) or
// {"model", "prompt"} for a completion whose prompt is one string.
func tokenizeRequest(ep *wire.Endpoint, model string, body []byte) (prompt, bool) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil {
		return prompt{}, false
	}
	field := v.Get(ep.TextField)
	if field == nil || (ep == wire.Completions && field.Type() != fastjson.TypeString) ||
		(ep == wire.ChatCompletions && field.Type() != fastjson.TypeArray) {
		return prompt{}, false
	}
	m, _ := json.Marshal(model)
	out := append(append([]byte(`{"model":`), m...), `,"`+ep.TextField+`":`...)
	out = field.MarshalTo(out)
	var tools []byte
	if t := v.Get("tools"); ep == wire.ChatCompletions && t != nil && len(t.GetArray()) > 0 {
		out = append(out, `,"tools":`...)
		n := len(out)
		out = t.MarshalTo(out)
		tools = out[n:]
	}
	out = append(out, '}')
	if ep == wire.Completions {
		return completionPrompt(out, model, field.GetStringBytes()), true
	}
	messages := field.GetArray()
	return chatPrompt(out, model, tools, messages), len(messages) > 0
}

// chatPrompt marks a chat after each message: the next turn of a
// conversation repeats them all and adds its own. Its tools come before
// them in the prompt: the marks of a chat with other tools are others.
func chatPrompt(body []byte, model string, tools []byte, messages []*fastjson.Value) prompt {
	p := prompt{body: body, marks: make([]uint64, 0, len(messages))}
	h := xxh3.HashSeed(tools, xxh3.HashString("chat\x00"+model))
	var buf []byte
	for _, msg := range messages {
		buf = msg.MarshalTo(buf[:0])
		h = xxh3.HashSeed(buf, h)
		p.marks = append(p.marks, h)
	}
	p.full = h
	return p
}

// completionPrompt marks a completion's prompt every promptChunk bytes: a
// continuation appends to it.
func completionPrompt(body []byte, model string, text []byte) prompt {
	seed := xxh3.HashString("prompt\x00" + model)
	p := prompt{body: body, text: text, full: xxh3.HashSeed(text, seed), marks: []uint64{seed}}
	h := seed
	for off := 0; off+promptChunk <= len(text); off += promptChunk {
		h = xxh3.HashSeed(text[off:off+promptChunk], h)
		p.marks = append(p.marks, h)
	}
	return p
}

// tokenCache is the tokens of the latest prompts, least recently used out:
// found whole for a prompt asked again (by its name), or as the longest
// earlier prompt a new one starts with (by the marks of the new one, under
// which the newest prompt ending past each mark is kept).
type tokenCache struct {
	mu     sync.Mutex
	limit  int        // entries
	budget int        // bytes of tokens and entries
	bytes  int        // what the entries take now
	order  *list.List // of *tokenEntry, newest first
	byFull map[uint64]*list.Element
	byMark map[uint64]*list.Element
}

// tokenEntry is one prompt's tokens.
type tokenEntry struct {
	mark   uint64 // the last mark of its prompt
	full   uint64 // its prompt's name
	size   int    // a completion's prompt length in bytes
	tokens []uint32
	// text is how many bytes of routing text its prompt has: what its
	// tokens stand for in a longer prompt that starts with it.
	text int
}

func newTokenCache(limit, budget int) *tokenCache {
	return &tokenCache{limit: limit, budget: budget, order: list.New(), byFull: map[uint64]*list.Element{},
		byMark: map[uint64]*list.Element{}}
}

// entryOverhead is what an entry takes besides its tokens: the entry, its
// list element and its two map slots, roughly.
const entryOverhead = 160

func (e *tokenEntry) bytes() int { return 4*cap(e.tokens) + entryOverhead }

// size is the bytes the entries take now.
func (c *tokenCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// lookup finds p's own tokens (whole), or else those of the longest earlier
// prompt p starts with (whole false).
func (c *tokenCache) lookup(p prompt) (e *tokenEntry, whole bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byFull[p.full]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*tokenEntry), true
	}
	for i := len(p.marks) - 1; i >= 0; i-- {
		el, ok := c.byMark[p.marks[i]]
		if !ok {
			continue
		}
		if e := el.Value.(*tokenEntry); p.starts(e) {
			c.order.MoveToFront(el)
			return e, false
		}
	}
	return nil, false
}

// lookupMarks finds the entry kept under the longest of marks, for a peer
// that asks (who checks that its prompt starts with the entry's).
func (c *tokenCache) lookupMarks(marks []uint64) *tokenEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(marks) - 1; i >= 0; i-- {
		if el, ok := c.byMark[marks[i]]; ok {
			c.order.MoveToFront(el)
			return el.Value.(*tokenEntry)
		}
	}
	return nil
}

// starts says whether p starts with e's prompt (and is longer), e being
// found by one of p's marks: a chat's marks name whole messages, so an
// entry of a chat found by an earlier mark than p's last is its prefix; a
// completion's prompt is checked byte for byte by its hash.
func (p prompt) starts(e *tokenEntry) bool {
	if e.full == p.full {
		return false
	}
	if p.text == nil {
		return e.full == e.mark // a chat's entry: named by its last message's mark
	}
	return e.size < len(p.text) && xxh3.HashSeed(p.text[:e.size], p.marks[0]) == e.full
}

// put keeps p's tokens, standing for text bytes of routing text, within
// the cache's bounds in entries and bytes (the least recently used go);
// tokens larger than the whole budget are not kept.
func (c *tokenCache) put(p prompt, tokens []uint32, text int) {
	c.putEntry(&tokenEntry{mark: p.marks[len(p.marks)-1], full: p.full, size: len(p.text), tokens: tokens, text: text})
}

// putEntry keeps e, as put does.
func (c *tokenCache) putEntry(e *tokenEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byFull[e.full]; ok {
		c.order.MoveToFront(el)
		return
	}
	if e.bytes() > c.budget {
		return
	}
	el := c.order.PushFront(e)
	c.byFull[e.full] = el
	c.byMark[e.mark] = el // the newest prompt past a mark is the one a continuation most likely starts with
	c.bytes += e.bytes()
	for c.order.Len() > c.limit || c.bytes > c.budget {
		c.drop(c.order.Back())
	}
}

func (c *tokenCache) drop(el *list.Element) {
	e := c.order.Remove(el).(*tokenEntry)
	c.bytes -= e.bytes()
	delete(c.byFull, e.full)
	if c.byMark[e.mark] == el {
		delete(c.byMark, e.mark)
	}
}
