package main

import (
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/sim"
)

// textGen is the text a completion generates. Unseeded, every token is fillerToken. Seeded (the
// request's seed, else --text-seed), each token is a word of the engine's width in bytes drawn
// from a hash of everything before it: the generation's context, then each token drawn. The
// hash runs over bytes, so a continuation whose context is the original one followed by the text
// generated so far (vLLM's way to continue a generation: the completion prompt extended, or the
// chat's partial assistant message with continue_final_message) draws exactly the rest of the
// original text, token for token: what the router's resumed streams are checked against.
type textGen struct {
	seeded bool
	seed   uint64
	state  uint64 // FNV-1a of the context and the tokens drawn so far
	width  int
	word   []byte
}

// FNV-1a, 64 bits: a hash that runs over bytes as they come.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func newTextGen(seeded bool, seed uint64, context []byte, width int) *textGen {
	g := &textGen{seeded: seeded, seed: seed, state: fnvOffset, width: max(width, 1)}
	g.absorb(context)
	return g
}

func (g *textGen) absorb(b []byte) {
	for _, c := range b {
		g.state = (g.state ^ uint64(c)) * fnvPrime
	}
}

// next draws the next token's text.
func (g *textGen) next() string {
	if !g.seeded {
		return fillerToken
	}
	x := splitmix(g.state ^ g.seed)
	g.word = g.word[:0]
	if g.width > 1 {
		g.word = append(g.word, ' ')
	}
	for len(g.word) < g.width {
		g.word = append(g.word, byte('a'+x%26))
		x = x/26 + splitmix(x)
	}
	g.absorb(g.word)
	return string(g.word)
}

// take draws the text of n tokens.
func (g *textGen) take(n int) string {
	return string(g.appendTake(make([]byte, 0, n*g.width), n))
}

// appendTake appends the text of the next n tokens to dst.
func (g *textGen) appendTake(dst []byte, n int) []byte {
	for range n {
		dst = append(dst, g.next()...)
	}
	return dst
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// generationContext is what a chat generation continues: the rendered conversation and the
// assistant's turn opened ("assistant\n"), or, with continue_final_message, the conversation but
// its last message, and that (assistant) message's role and content, left open. Both render the
// same bytes for a partial answer and for the answer generated so far. prompt is what the engine
// computes: with continue_final_message the last message's content, not its closing newline, so
// that the prompt grows by exactly the generated text.
func generationContext(v *fastjson.Value, continueFinal bool) (context, prompt []byte, err error) {
	full, err := sim.AppendChatRequestJSON(nil, v)
	if err != nil {
		return nil, nil, err
	}
	msgs := v.GetArray("messages")
	if !continueFinal || len(msgs) == 0 {
		return append(full, "assistant\n"...), full, nil
	}
	var a fastjson.Arena
	last := a.NewArray()
	last.SetArrayItem(0, msgs[len(msgs)-1])
	tail, err := sim.AppendChatJSON(nil, last)
	if err != nil || len(tail) > len(full) {
		return nil, nil, err
	}
	open := full[:len(full)-1] // the last message without its closing newline
	before := full[:len(full)-len(tail)]
	prompt = append(append([]byte(nil), before...), msgs[len(msgs)-1].GetStringBytes("content")...)
	return open, prompt, nil
}
