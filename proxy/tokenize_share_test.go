package proxy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/proxy/wire"
)

// TestATokenEntryCrossesTheWireWhole: what a keeper answers is what the
// giver kept, token for token.
func TestATokenEntryCrossesTheWireWhole(t *testing.T) {
	e := &tokenEntry{full: 7, mark: 9, size: 1000, text: 900, tokens: []uint32{1, 2, 3, 4294967295}}
	got, err := parseTokenEntry(appendTokenEntry(nil, e))
	if err != nil {
		t.Fatal(err)
	}
	if got.full != e.full || got.mark != e.mark || got.size != e.size || got.text != e.text || !slices.Equal(got.tokens, e.tokens) {
		t.Fatalf("got %+v, want %+v", got, e)
	}
	marks, err := parseTokenQuery(appendTokenQuery(nil, []uint64{3, 1 << 63, 5}))
	if err != nil || !slices.Equal(marks, []uint64{3, 1 << 63, 5}) {
		t.Fatalf("query marks %v, %v", marks, err)
	}
}

// TestAMalformedOrLyingTokenEntryIsRefused: a peer's entry is bounded
// before anything is allocated for it: truncated, another version, more
// tokens than its text could make, or bytes past its tokens are refused.
func TestAMalformedOrLyingTokenEntryIsRefused(t *testing.T) {
	good := appendTokenEntry(nil, &tokenEntry{full: 1, mark: 2, size: 10, text: 10, tokens: []uint32{1, 2}})
	lying := appendTokenEntry(nil, &tokenEntry{full: 1, mark: 2, size: 1, text: 1, tokens: make([]uint32, templateTokens+2)})
	for name, b := range map[string][]byte{
		"empty": nil, "truncated": good[:len(good)-1], "trailing": append(slices.Clone(good), 0),
		"version": append([]byte{9}, good[1:]...), "more tokens than text": lying,
	} {
		if _, err := parseTokenEntry(b); !errors.Is(err, errTokenWire) {
			t.Errorf("%s: parsed (%v)", name, err)
		}
	}
	q := appendTokenQuery(nil, []uint64{1, 2})
	for name, b := range map[string][]byte{"empty": nil, "truncated": q[:len(q)-1], "count": append([]byte{1, 200}, q[2:]...)} {
		if _, err := parseTokenQuery(b); !errors.Is(err, errTokenWire) {
			t.Errorf("query %s: parsed (%v)", name, err)
		}
	}
}

// TestAPeersEntryIsUsedOnlyForAPromptThatExtendsIt: the asker checks what a
// keeper answers: a completion whose prompt starts with the entry's, and a
// chat whose messages include the entry's last, are continued by it; the
// same prompt, another text of the same length, or another chat is not.
func TestAPeersEntryIsUsedOnlyForAPromptThatExtendsIt(t *testing.T) {
	earlier := strings.Repeat("turn one, ", 60)
	entryOf := func(p prompt) *tokenEntry {
		return &tokenEntry{full: p.full, mark: p.marks[len(p.marks)-1], size: len(p.text), tokens: []uint32{1}}
	}
	completion := func(text string) prompt {
		p, ok := tokenizeRequest(wire.Completions, "m", []byte(`{"model":"m","prompt":"`+text+`"}`))
		if !ok {
			t.Fatal("no prompt")
		}
		return p
	}
	e := entryOf(completion(earlier))
	if !completion(earlier + "turn two").extends(e) {
		t.Error("a completion that goes on from the entry's prompt does not extend it")
	}
	if completion(earlier).extends(e) {
		t.Error("the entry's own prompt extends it")
	}
	if completion(strings.Repeat("turn uno, ", 60) + "turn two").extends(e) {
		t.Error("another prompt extends the entry")
	}
	chat := func(msgs ...string) prompt {
		var b strings.Builder
		for i, m := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"role":"user","content":"` + m + `"}`)
		}
		p, ok := tokenizeRequest(wire.ChatCompletions, "m", []byte(`{"model":"m","messages":[`+b.String()+`]}`))
		if !ok {
			t.Fatal("no chat prompt")
		}
		return p
	}
	c := chat("hello", "more")
	ce := &tokenEntry{full: c.full, mark: c.full, tokens: []uint32{1}}
	if !chat("hello", "more", "again").extends(ce) {
		t.Error("a chat that goes on from the entry's messages does not extend it")
	}
	if chat("hello", "other", "again").extends(ce) {
		t.Error("another chat extends the entry")
	}
}
