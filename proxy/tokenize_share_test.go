package proxy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/affinity"
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

// keeperDouble is a tier's keepers as a test sets them: one peer keeps
// every worker's prompts and answers each question with answer, or err.
type keeperDouble struct {
	keeper string
	answer []byte
	err    error
	asked  int
}

func (k *keeperDouble) KeeperOf(affinity.WorkerID) string { return k.keeper }

func (k *keeperDouble) Find(string, []byte, time.Time) ([]byte, error) {
	k.asked++
	return k.answer, k.err
}

func (k *keeperDouble) Keep(string, []byte, time.Time) error { return nil }

// TestATurnUsesOnlyWhatItsKeeperKeptOfItsOwnConversation: a turn that
// continues an earlier one (the index knows where the earlier one went)
// asks that worker's keeper; a keeper that fails, has nothing, answers
// bytes that do not decode, or answers another conversation's tokens
// leaves the turn to the engine, counted; the earlier turn's tokens are
// used, and kept here for the next turn. A prompt that continues nothing,
// or whose keeper is this replica, asks no one.
func TestATurnUsesOnlyWhatItsKeeperKeptOfItsOwnConversation(t *testing.T) {
	earlierText := strings.Repeat("the first turn of this conversation, ", 20)
	prompt := func(text string) prompt {
		p, ok := tokenizeRequest(wire.Completions, "m", []byte(`{"model":"m","prompt":"`+text+`"}`))
		if !ok {
			t.Fatal("no prompt")
		}
		return p
	}
	earlier, next := prompt(earlierText), prompt(earlierText+"and the second turn, which goes on")
	kept := appendTokenEntry(nil, &tokenEntry{full: earlier.full, mark: earlier.marks[len(earlier.marks)-1],
		size: len(earlier.text), text: len(earlierText), tokens: []uint32{7, 8, 9}})
	other := prompt(strings.Repeat("another conversation altogether, ", 20))
	otherKept := appendTokenEntry(nil, &tokenEntry{full: other.full, mark: other.marks[len(other.marks)-1],
		size: len(other.text), text: 600, tokens: []uint32{1}})

	index := affinity.NewIndex(clock.RealClock{}, 1000)
	loads := affinity.NewLoadTable(nil)
	pool := affinity.NewPool([]*affinity.Load{loads.Get(1), loads.Get(2)})
	hashes := affinity.BlockHashes(nil, "m", []byte(earlierText+"and the second turn, which goes on"), 16)
	index.Learn(affinity.Fact{Hash: hashes[len(hashes)-3], Worker: 2, Span: 1})
	req := &affinity.Request{Hashes: hashes}

	for _, tc := range []struct {
		name   string
		share  *keeperDouble
		used   bool
		counts func(shareCounts) uint64
	}{
		{"a keeper that fails", &keeperDouble{keeper: "peer", err: errors.New("refused")}, false,
			func(c shareCounts) uint64 { return c.findFailed.Get() }},
		{"a keeper with nothing", &keeperDouble{keeper: "peer"}, false, func(c shareCounts) uint64 { return c.findNone.Get() }},
		{"bytes that do not decode", &keeperDouble{keeper: "peer", answer: []byte{1, 2, 3}}, false,
			func(c shareCounts) uint64 { return c.findFailed.Get() }},
		{"another conversation's tokens", &keeperDouble{keeper: "peer", answer: otherKept}, false,
			func(c shareCounts) uint64 { return c.findFailed.Get() }},
		{"the earlier turn's tokens", &keeperDouble{keeper: "peer", answer: kept}, true,
			func(c shareCounts) uint64 { return c.found.Get() }},
	} {
		tok := newTokenizer(TokenizeConfig{}, "", nil, tc.share, index, metrics.NewSet())
		e := tok.fromKeeper(req, pool, next, time.Now().Add(time.Second))
		if used := e != nil; used != tc.used || tc.share.asked != 1 || tc.counts(tok.shared) != 1 {
			t.Errorf("%s: used %v (want %v), asked %d times, counted %d", tc.name, used, tc.used, tc.share.asked, tc.counts(tok.shared))
		}
		if tc.used {
			if !slices.Equal(e.tokens, []uint32{7, 8, 9}) || e.text != len(earlierText) {
				t.Errorf("%s: routed on %v standing for %d bytes", tc.name, e.tokens, e.text)
			}
			if found, whole := tok.cache.lookup(next); found == nil || whole {
				t.Errorf("%s: the kept tokens are not here for the next turn", tc.name)
			}
		}
	}
	for name, share := range map[string]*keeperDouble{"its own keeper": {keeper: ""}} {
		tok := newTokenizer(TokenizeConfig{}, "", nil, share, index, metrics.NewSet())
		if tok.fromKeeper(req, pool, next, time.Now().Add(time.Second)) != nil || share.asked != 0 {
			t.Errorf("%s: asked %d times", name, share.asked)
		}
	}
	tok := newTokenizer(TokenizeConfig{}, "", nil, &keeperDouble{keeper: "peer", answer: kept}, index, metrics.NewSet())
	if tok.fromKeeper(&affinity.Request{Hashes: affinity.BlockHashes(nil, "m", []byte(strings.Repeat("new ", 200)), 16)}, pool, next, time.Now().Add(time.Second)) != nil {
		t.Error("a prompt that continues no earlier turn asked a keeper")
	}
}

// FuzzATokenEntryOrQueryFromAPeer: whatever a peer sends as a token entry
// or query never panics, and what decodes is within its bounds and
// encodes back to the same bytes.
func FuzzATokenEntryOrQueryFromAPeer(f *testing.F) {
	f.Add(appendTokenEntry(nil, &tokenEntry{full: 1, mark: 2, size: 10, text: 10, tokens: []uint32{1, 2}}))
	f.Add(appendTokenQuery(nil, []uint64{3, 4}))
	f.Add([]byte{1, 255, 255, 255, 255, 15})
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := parseTokenEntry(b); err == nil {
			if len(e.tokens) > maxSharedTokens || len(e.tokens) > e.text+templateTokens {
				t.Fatalf("%d tokens for %d bytes of text passed", len(e.tokens), e.text)
			}
			if again := appendTokenEntry(nil, e); !slices.Equal(again, b) {
				t.Fatalf("entry %x encodes back as %x", b, again)
			}
		}
		if marks, err := parseTokenQuery(b); err == nil && !slices.Equal(appendTokenQuery(nil, marks), b) {
			t.Fatalf("query %x encodes back differently", b)
		}
	})
}
