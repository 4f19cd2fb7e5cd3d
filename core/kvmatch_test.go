package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/loadsync"
	testingclock "k8s.io/utils/clock/testing"
)

const kvBlock = 4 // tokens per engine block in these tests

// fakeEvents is a KVSource whose engines hold what the test says: worker ->
// the keys its set holds, and its stream's state.
type fakeEvents struct {
	held     map[uint32]map[kvevents.Key]bool
	trust    map[uint32]kvevents.Trust
	expected []uint32
	evicted  map[uint32]time.Time // when the worker's engine last evicted anything
}

func newFakeEvents() *fakeEvents {
	return &fakeEvents{held: map[uint32]map[kvevents.Key]bool{}, trust: map[uint32]kvevents.Trust{}, evicted: map[uint32]time.Time{}}
}

func (f *fakeEvents) BlockSize() int { return kvBlock }

func (f *fakeEvents) Keys(dst []kvevents.Key, identity string, tokens []uint32) []kvevents.Key {
	return kvevents.AppendKeys(dst, kvevents.Seed(identity), tokens, kvBlock)
}

func (f *fakeEvents) Matched(w uint32, keys []kvevents.Key) (int, kvevents.Trust) {
	if t, ok := f.trust[w]; ok && t != kvevents.Trusted {
		return 0, t
	}
	for i, k := range keys {
		if !f.held[w][k] {
			return i, kvevents.Trusted
		}
	}
	return len(keys), kvevents.Trusted
}

func (f *fakeEvents) Expect(w uint32) { f.expected = append(f.expected, w) }

func (f *fakeEvents) EvictedSince(w uint32, _ []kvevents.Key, t time.Time) bool {
	at, ok := f.evicted[w]
	return ok && !at.Before(t)
}

// stores makes w's engine hold the first blocks of tokens.
func (f *fakeEvents) stores(w uint32, tokens []uint32, blocks int) {
	if f.held[w] == nil {
		f.held[w] = map[kvevents.Key]bool{}
	}
	for _, k := range f.Keys(nil, "", tokens)[:blocks] {
		f.held[w][k] = true
	}
}

// kvCore is one core over workers 1..3 that routes on ev.
func kvCore(t *testing.T, ev *fakeEvents) (*Replica, *affinity.Router, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	r, err := New(Config{Clock: clk, BlockSize: blockSize, IndexBudget: 1 << 16, KV: ev, KVReservation: 5 * time.Second,
		Gossip: &loadsync.Config{Origin: "replica-0", BootEpoch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetRegistry([]affinity.WorkerID{1, 2, 3})
	return r, router(t, r), clk
}

// kvPrompt is a routing text of 8 text blocks and its 32 tokens (one token
// per 4 bytes, 8 engine blocks).
func kvPrompt(seed byte) ([]byte, []uint32) {
	text := make([]byte, 8*blockSize)
	tokens := make([]uint32, len(text)/4)
	for i := range text {
		text[i] = 'a' + (seed+byte(i/blockSize))%26
	}
	for i := range tokens {
		tokens[i] = uint32(seed)<<16 | uint32(i)
	}
	return text, tokens
}

func decideTokens(t *testing.T, r *Replica, rt *affinity.Router, text []byte, tokens []uint32) Decided {
	t.Helper()
	req := rt.Prepare("m", text, 0)
	req.Tokens = tokens
	d, g, err := r.Decide(rt, req, allPool(r))
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	return d
}

func TestOnEventsAPrefixGoesToTheWorkerWhoseEngineHoldsItNotToTheOneTheIndexRemembers(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(1)
	if d := decideTokens(t, r, rt, text, tokens); d.Hit {
		t.Fatalf("a cold prompt was a hit on %d", d.Worker)
	}
	owner := decideTokens(t, r, rt, text, tokens).Worker // the index now remembers owner
	clk.Step(time.Minute)                                // past the reservation: the engine has spoken since
	other := uint32(owner%3 + 1)
	ev.stores(other, tokens, 8) // the owner evicted it, another worker computed it
	d := decideTokens(t, r, rt, text, tokens)
	if !d.Hit || uint32(d.Worker) != other {
		t.Fatalf("decided %+v; want a hit on %d, whose engine holds the prefix (the index remembers %d)", d.Decision, other, owner)
	}
	gone, goneTokens := kvPrompt(9)
	decideTokens(t, r, rt, gone, goneTokens)
	clk.Step(time.Minute) // the engine stored it and evicted it since; nobody holds it
	if d := decideTokens(t, r, rt, gone, goneTokens); d.Hit {
		t.Fatalf("decided %+v: a hit on a prefix no engine holds (a false hit)", d.Decision)
	}
	if k := r.KVRouting(); k.Requests != 5 || k.OnText != 0 {
		t.Errorf("counts %+v", k)
	}
}

// TestOnEventsAnEvictedConversationGoesBackToItsWorkerAsAMiss: in a tier,
// prompts whose engines evicted them are misses, each placed again on the
// worker the index last saw it on, not wherever least load points (which
// would gather them on some workers and leave others with none); a former
// worker that is busy is passed over.
func TestOnEventsAnEvictedConversationGoesBackToItsWorkerAsAMiss(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	r.Loads().SetPeerShare(3, time.Second, clk) // in a tier of four
	var texts [][]byte
	var tokens [][]uint32
	var first []affinity.WorkerID
	for i := range 6 {
		text, toks := kvPrompt(byte(10 + i))
		texts, tokens = append(texts, text), append(tokens, toks)
		first = append(first, decideTokens(t, r, rt, text, toks).Worker)
	}
	clk.Step(time.Minute) // past the reservations: the engines hold none of them
	for i := range texts {
		g := r.Loads().Acquire(r.Loads().Get(first[i])) // one request more there than elsewhere: least load would pass it over
		if d := decideTokens(t, r, rt, texts[i], tokens[i]); d.Hit || d.Worker != first[i] {
			t.Errorf("prompt %d, evicted from %d: decided %+v; want a miss on %d", i, first[i], d.Decision, first[i])
		}
		g.Release()
	}
	clk.Step(time.Minute)
	busy := r.Loads().Get(first[0])
	var guards []*affinity.Guard
	for range 8 {
		guards = append(guards, r.Loads().Acquire(busy))
	}
	if d := decideTokens(t, r, rt, texts[0], tokens[0]); d.Worker == first[0] {
		t.Errorf("decided %+v: back on its former worker with 8 requests more than the others", d.Decision)
	}
	for _, g := range guards {
		g.Release()
	}
	req := rt.Prepare("m", texts[1], 0) // its former worker out of the pool (removed, or failed this request)
	req.Tokens = tokens[1]
	d, g, err := r.Decide(rt, req, allPool(r).Without(first[1]))
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if d.Worker == first[1] || d.Hit {
		t.Errorf("decided %+v over a pool without %d", d.Decision, first[1])
	}
}

func TestOnEventsAWorkerWhoseStreamIsNotTrustedIsMatchedOnTheTextIndex(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(2)
	owner := decideTokens(t, r, rt, text, tokens).Worker
	clk.Step(time.Minute)
	ev.trust[uint32(owner)] = kvevents.Stale
	d := decideTokens(t, r, rt, text, tokens)
	if !d.Hit || d.Worker != owner {
		t.Fatalf("decided %+v; want the text index's hit on %d, whose stream is stale", d.Decision, owner)
	}
	if k := r.KVRouting(); k.OnText == 0 {
		t.Errorf("no candidate counted on the text index: %+v", k)
	}
}

func TestOnEventsAnInFlightReservationCoversBlocksTheEngineHasNotStoredYet(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(3)
	owner := decideTokens(t, r, rt, text, tokens).Worker
	if len(ev.expected) != 1 || ev.expected[0] != uint32(owner) {
		t.Fatalf("expected stores from %v, want [%d]", ev.expected, owner)
	}
	clk.Step(time.Second) // within the reservation, the engine has said nothing yet
	d := decideTokens(t, r, rt, text, tokens)
	if !d.Hit || d.Worker != owner {
		t.Fatalf("decided %+v; want a hit on %d, reserved a second ago", d.Decision, owner)
	}
	if k := r.KVRouting(); k.Reserved == 0 {
		t.Errorf("no reservation counted: %+v", k)
	}
	clk.Step(10 * time.Second) // the reservation is over and the engine stored nothing
	if d := decideTokens(t, r, rt, text, tokens); d.Hit {
		t.Fatalf("decided %+v: a hit on a reservation the engine never backed", d.Decision)
	}
}

func TestOnEventsAPartialMatchIsJudgedByTheCacheThresholdAsTheIndexIs(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(4)
	clk.Step(time.Minute)
	ev.stores(2, tokens, 2) // a quarter of the prompt: under the 0.3 threshold
	if d := decideTokens(t, r, rt, text, tokens); d.Hit {
		t.Fatalf("decided %+v: a quarter held is not a hit", d.Decision)
	}
	text, tokens = kvPrompt(5)
	ev.stores(3, tokens, 4) // half
	if d := decideTokens(t, r, rt, text, tokens); !d.Hit || d.Worker != 3 || d.Matched != 4*blockSize {
		t.Fatalf("decided %+v; want a hit on 3 matching half the text", d.Decision)
	}
}

func TestOnEventsAReservationIsSpentOnceTheEngineEvictedThePromptsBlocks(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(6)
	owner := decideTokens(t, r, rt, text, tokens).Worker
	clk.Step(time.Second) // within the reservation: stored, then evicted by others' work
	ev.evicted[uint32(owner)] = clk.Now()
	if d := decideTokens(t, r, rt, text, tokens); d.Hit {
		t.Fatalf("decided %+v: a hit on a reservation whose blocks the engine evicted", d.Decision)
	}
}

func TestOnEventsAPeersDecisionCoversTheWindowBeforeTheEngineStoresItsBlocks(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	ev := newFakeEvents()
	var rs []*Replica
	for i := range 2 {
		r, err := New(Config{Clock: clk, BlockSize: blockSize, IndexBudget: 1 << 16, KV: ev, KVReservation: 5 * time.Second,
			Gossip: &loadsync.Config{Origin: fmt.Sprintf("replica-%d", i), BootEpoch: uint64(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		r.SetRegistry([]affinity.WorkerID{1, 2, 3})
		rs = append(rs, r)
	}
	text, tokens := kvPrompt(7)
	first := decideTokens(t, rs[0], router(t, rs[0]), text, tokens)
	clk.Step(100 * time.Millisecond)
	exchange(t, rs, clk.Now()) // the engine has stored nothing yet; the peer's fact has arrived
	d := decideTokens(t, rs[1], router(t, rs[1]), text, tokens)
	if !d.Hit || d.Worker != first.Worker {
		t.Fatalf("the peer decided %+v; want a hit on %d, where the first replica sent the prompt", d.Decision, first.Worker)
	}
}

// A conversation's next prompt is routed on its earlier prompt's tokens
// (TokenText: the bytes of the text they stand for): a match of all of
// them is a match of that much of the text, not of the whole prompt.
func TestOnEventsTheTokensOfAPrefixMatchTheTextTheyStandFor(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	text, tokens := kvPrompt(8)
	clk.Step(time.Minute)
	ev.stores(2, tokens, 8)
	long := append(append([]byte(nil), text...), make([]byte, 8*blockSize)...) // the next turn: twice as long
	req := rt.Prepare("m", long, 0)
	req.Tokens, req.TokenText = tokens, len(text)
	d, g, err := r.Decide(rt, req, allPool(r))
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if !d.Hit || d.Worker != 2 || d.Matched != len(text) {
		t.Fatalf("decided %+v; want a hit on 2 matching the %d bytes the earlier prompt's tokens stand for", d.Decision, len(text))
	}
}

// TestOnEventsAFalseHitSaysWhetherTheEngineOrAReservationBackedIt: a hit
// on blocks the engine's events showed is a false hit of the engine's fact
// when its answer found them gone, and an evicted one when the events
// removed them after the decision (before the engine admitted the request);
// a hit on an in-flight reservation is one of the replica's own fact; an
// answer with nothing cached is also counted as such.
func TestOnEventsAFalseHitSaysWhetherTheEngineOrAReservationBackedIt(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	clk.Step(time.Minute)
	text, tokens := kvPrompt(8)
	ev.stores(2, tokens, 8)
	stored := decideTokens(t, r, rt, text, tokens)
	if !stored.Hit || stored.Worker != 2 || stored.Fact != FactEngine {
		t.Fatalf("decided %+v (fact %v); want a hit on 2 from the engine's events", stored.Decision, stored.Fact)
	}
	clk.Step(10 * time.Millisecond)
	ev.evicted[2] = clk.Now() // while the request waited for the engine
	r.Answered(stored, usage(0, 32))

	text, tokens = kvPrompt(10)
	ev.stores(3, tokens, 8)
	kept := decideTokens(t, r, rt, text, tokens) // its engine lost the blocks without an event after the decision
	if !kept.Hit || kept.Worker != 3 || kept.Fact != FactEngine {
		t.Fatalf("decided %+v (fact %v); want a hit on 3 from the engine's events", kept.Decision, kept.Fact)
	}
	r.Answered(kept, usage(4, 32))

	text, tokens = kvPrompt(9)
	owner := decideTokens(t, r, rt, text, tokens).Worker // a miss: its reservation is recorded
	clk.Step(time.Second)
	reserved := decideTokens(t, r, rt, text, tokens)
	if !reserved.Hit || reserved.Worker != owner || reserved.Fact != FactOwn {
		t.Fatalf("decided %+v (fact %v); want a hit on %d from this replica's reservation", reserved.Decision, reserved.Fact, owner)
	}
	r.Answered(reserved, usage(4, 32))

	a := r.Attribution()
	if a.FalseHits != 3 || a.FalseHitsByFact[FactEngine] != 2 || a.FalseHitsByFact[FactOwn] != 1 ||
		a.FalseHitsUncached != 1 || a.FalseHitsEvicted != 1 || a.PredictedHitsByFact[FactEngine] < 2 ||
		a.PredictedHitsByFact[FactOwn] < 1 || a.PredictedHitsByFact[FactEngine]+a.PredictedHitsByFact[FactOwn]+
		a.PredictedHitsByFact[FactPeer]+a.PredictedHitsByFact[FactNone] != a.PredictedHits {
		t.Errorf("false hits %d, by fact %v, none cached %d, evicted %d, predicted by fact %v of %d; want 3, two engine and one own, one with none cached, one evicted, the predictions split by fact",
			a.FalseHits, a.FalseHitsByFact, a.FalseHitsUncached, a.FalseHitsEvicted, a.PredictedHitsByFact, a.PredictedHits)
	}
}
