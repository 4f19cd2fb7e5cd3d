package core

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
)

// coldBurst is n prompts that share nothing, one per replica of a burst.
func coldBurst(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "session %02d: %s", i, bytesOf('a'+byte(i), 4*blockSize))
	}
	return out
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestThePlacerSpreadsABurstOfColdRequestsFromEveryReplica: eight replicas
// each get one new session in the same instant, before any has heard of
// another's. Each asks the placer, which counts the ones it placed before,
// so the eight land on eight workers, as one replica would place them;
// deciding alone, replicas that each see eight idle workers put some of
// them on the same one.
func TestThePlacerSpreadsABurstOfColdRequestsFromEveryReplica(t *testing.T) {
	const n = 8
	reps, _ := tier(t, n, n)
	for _, r := range reps {
		r.SetPeers(n-1, 100*time.Millisecond)
	}
	placer, prompts := reps[0], coldBurst(n)
	placerRouter := router(t, placer)
	var placed, alone []affinity.WorkerID
	for i, r := range reps {
		rt := router(t, r)
		req := rt.Prepare("m", prompts[i], 0)
		if !r.decide.cold(req, allPool(r)) {
			t.Fatalf("replica %d: a prompt nobody has seen is not cold", i)
		}
		d, err := placement(placer).answer(placerRouter, placement(r).ask(req, allPool(r)))
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := r.decide.decideOn(rt, req, allPool(r), d.Decision)
		if err != nil {
			t.Fatal(err)
		}
		if got.Worker != d.Worker {
			t.Fatalf("replica %d routed to %d, the placer chose %d", i, got.Worker, d.Worker)
		}
		placed = append(placed, got.Worker)
	}
	others, _ := tier(t, n, n)
	for i, r := range others {
		r.SetPeers(n-1, 100*time.Millisecond)
		rt := router(t, r)
		d, _, err := r.Decide(rt, rt.Prepare("m", prompts[i], 0), allPool(r))
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, d.Worker)
	}
	if distinct(placed) != n {
		t.Errorf("through the placer the burst took %d workers of %d: %v", distinct(placed), n, placed)
	}
	if distinct(alone) == n {
		t.Errorf("deciding alone the burst took all %d workers (%v): the test shows nothing", n, alone)
	}
}

func distinct(ws []affinity.WorkerID) int {
	s := slices.Clone(ws)
	slices.Sort(s)
	return len(slices.Compact(s))
}

// TestColdSaysWhetherACandidateHoldsThePrefix: a prompt recorded on a
// worker is not cold while that worker is a candidate; it is cold over a
// pool without it, and a prompt nobody recorded is cold.
func TestColdSaysWhetherACandidateHoldsThePrefix(t *testing.T) {
	reps, _ := tier(t, 1, 4)
	r := reps[0]
	rt := router(t, r)
	seen := rt.Prepare("m", coldBurst(1)[0], 0)
	d, _, err := r.Decide(rt, seen, allPool(r))
	if err != nil {
		t.Fatal(err)
	}
	again := rt.Prepare("m", coldBurst(1)[0], 0)
	if r.decide.cold(again, allPool(r)) {
		t.Error("a prompt recorded on a candidate is cold")
	}
	if !r.decide.cold(again, allPool(r).Without(d.Worker)) {
		t.Error("a prompt recorded only on a worker outside the pool is not cold")
	}
	if !r.decide.cold(rt.Prepare("m", coldBurst(2)[1], 0), allPool(r)) {
		t.Error("a prompt nobody recorded is not cold")
	}
}

// TestThePlacerPlacesEveryRequestOfItsOwnAndOthersAskOnlyWhenCold: a
// replica asks the placer for a cold request and decides a known one
// itself; the placer places its own, known or not, so that the peers'
// share of a burst is not counted on top of the burst it sees.
func TestThePlacerPlacesEveryRequestOfItsOwnAndOthersAskOnlyWhenCold(t *testing.T) {
	reps, _ := tier(t, 1, 4)
	r := reps[0]
	rt := router(t, r)
	if _, _, err := r.Decide(rt, rt.Prepare("m", coldBurst(1)[0], 0), allPool(r)); err != nil {
		t.Fatal(err)
	}
	known, cold := rt.Prepare("m", coldBurst(1)[0], 0), rt.Prepare("m", coldBurst(2)[1], 0)
	for _, tc := range []struct {
		name     string
		req      *affinity.Request
		isPlacer bool
		want     placing
	}{
		{"a known prefix on a peer", known, false, decideHere},
		{"a cold request on a peer", cold, false, askPlacer},
		{"a known prefix on the placer", known, true, placeHere},
		{"a cold request on the placer", cold, true, placeHere},
	} {
		if got := r.decide.placingOf(rt, tc.req, allPool(r), tc.isPlacer); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestAPlacedWorkerOutsideThePoolIsRefused: an answer naming a worker the
// asker may not use (unhealthy here, or tried already) is refused, and
// nothing is reserved.
func TestAPlacedWorkerOutsideThePoolIsRefused(t *testing.T) {
	reps, _ := tier(t, 1, 4)
	r := reps[0]
	rt := router(t, r)
	pool := allPool(r).Without(2)
	_, _, err := r.decide.decideOn(rt, rt.Prepare("m", coldBurst(1)[0], 0), pool, affinity.Decision{Worker: 2})
	if !errors.Is(err, affinity.ErrNotACandidate) {
		t.Fatalf("err = %v, want ErrNotACandidate", err)
	}
	if l := r.Loads().Lookup(2).Local(); l != 0 {
		t.Errorf("worker 2 holds %d reservations after a refused placement", l)
	}
}

func TestAQuestionAndAPlacementSurviveTheWire(t *testing.T) {
	q := Question{From: "replica-3", Seq: 1 << 40, Hashes: []uint64{1, 2, 1 << 63}, Full: 2, Tail: 99, TextLen: 700,
		Candidates: []affinity.WorkerID{3, 1, 400}}
	got, err := ParseQuestion(q.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.From != q.From || got.Seq != q.Seq || !slices.Equal(got.Hashes, q.Hashes) || got.Full != q.Full || got.Tail != q.Tail || got.TextLen != q.TextLen ||
		!slices.Equal(got.Candidates, q.Candidates) {
		t.Fatalf("got %+v, want %+v", got, q)
	}
	if b := q.AppendBinary(nil); b[0] != keylessWireVersion {
		t.Errorf("a question without keys is written as version %d, want %d (the version before reads it)", b[0], keylessWireVersion)
	}
	q.KV, q.Tokens, q.TokenText = []kvevents.Key{7, 1 << 31, 0}, 12, 640
	got, err = ParseQuestion(q.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.KV, q.KV) || got.Tokens != q.Tokens || got.TokenText != q.TokenText || !slices.Equal(got.Hashes, q.Hashes) {
		t.Fatalf("with keys: got %+v, want %+v", got, q)
	}
	d := affinity.Decision{Worker: 7, Hit: true, Matched: 4096}
	back, err := ParsePlacement(AppendPlacement(nil, d))
	if err != nil || back.Worker != d.Worker || back.Hit != d.Hit || back.Matched != d.Matched {
		t.Fatalf("placement %+v, %v; want %+v", back, err, d)
	}
}

func TestMalformedPlacementMessagesAreRefused(t *testing.T) {
	good := Question{Hashes: []uint64{1, 2}, Full: 2, TextLen: 32, Candidates: []affinity.WorkerID{1}}.AppendBinary(nil)
	keyed := Question{Hashes: []uint64{1}, Full: 1, KV: []kvevents.Key{1, 2}, Tokens: 8}.AppendBinary(nil)
	huge := append([]byte{placeWireVersion, 0, 0, 0}, make([]byte, 8)...)
	huge = append(huge, 0, 0xff, 0xff, 0xff, 0xff, 0x0f) // 2^32-1 hashes announced
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"another version":       append([]byte{placeWireVersion + 1}, good[1:]...),
		"a version before 2":    append([]byte{keylessWireVersion - 1}, good[1:]...),
		"truncated":             good[:len(good)-3],
		"bytes past the end":    append(slices.Clone(good), 0),
		"more hashes than sent": huge,
		"more full than hashes": Question{Hashes: []uint64{1}, Full: 2}.AppendBinary(nil),
		"a name over 128 bytes": Question{From: string(bytesOf('r', 129))}.AppendBinary(nil),
		"a name past the end":   {placeWireVersion, 5, 'r'},
		"more keys than tokens": Question{KV: []kvevents.Key{1, 2, 3}, Tokens: 2}.AppendBinary(nil),
		"keys past the end":     keyed[:len(keyed)-1],
		"no keys in version 3":  append(append([]byte{placeWireVersion}, good[1:]...), 4, 0, 0),
	} {
		if _, err := ParseQuestion(b); !errors.Is(err, ErrBadPlacement) {
			t.Errorf("%s: err = %v, want ErrBadPlacement", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"hit of 2":     {placeWireVersion, 1, 2, 0},
		"truncated":    {placeWireVersion, 1},
		"past the end": {placeWireVersion, 1, 0, 0, 0},
	} {
		if _, err := ParsePlacement(b); !errors.Is(err, ErrBadPlacement) {
			t.Errorf("placement %s: err = %v, want ErrBadPlacement", name, err)
		}
	}
}

// TestThePlacerHoldsAPeersRequestUntilThePeersReportCountsIt: the placer's
// view counts a peer's placed request exactly once at every step: by its own
// hold while the answer travels and the peer's report does not count it
// yet, by the peer's report once that counts it. A question the peer gave
// up on ends the hold the same way, and a hold that no report ends is ended
// by the bound.
func TestThePlacerHoldsAPeersRequestUntilThePeersReportCountsIt(t *testing.T) {
	reps, clk := tier(t, 2, 4)
	placer, peer := reps[0], reps[1]
	placerRouter, rt := router(t, placer), router(t, peer)
	step := func() {
		t.Helper()
		clk.Step(time.Second)
		exchange(t, reps, clk.Now())
	}
	onPlacer := func(w affinity.WorkerID) int64 { return placer.Loads().Lookup(w).Merged() }
	step()

	req := rt.Prepare("m", coldBurst(1)[0], 0)
	q := placement(peer).ask(req, allPool(peer))
	d, err := placement(placer).answer(placerRouter, q)
	if err != nil {
		t.Fatal(err)
	}
	if n := onPlacer(d.Worker); n != 1 {
		t.Fatalf("the placer counts %d requests on the worker it chose, want 1", n)
	}
	step() // the peer's report, sent before the answer reached it
	if n := onPlacer(d.Worker); n != 1 {
		t.Fatalf("before the peer reserved, the placer counts %d, want 1", n)
	}
	_, g, err := peer.decide.decideOn(rt, req, allPool(peer), d.Decision)
	if err != nil {
		t.Fatal(err)
	}
	peer.questions.settle(q.Seq)
	if n := onPlacer(d.Worker); n != 1 {
		t.Fatalf("with the peer's report on its way, the placer counts %d, want 1", n)
	}
	step()
	if n, local := onPlacer(d.Worker), placer.Loads().Lookup(d.Worker).Local(); n != 1 || local != 0 {
		t.Fatalf("after the peer's report the placer counts %d (%d its own), want 1 (0)", n, local)
	}
	g.Release()

	given := placement(peer).ask(req, allPool(peer))
	d, err = placement(placer).answer(placerRouter, given)
	if err != nil {
		t.Fatal(err)
	}
	peer.questions.settle(given.Seq) // the answer came too late: decided alone
	step()
	if n := onPlacer(d.Worker); n != 0 {
		t.Errorf("after the peer gave the question up, the placer counts %d, want 0", n)
	}

	lost := placement(peer).ask(req, allPool(peer))
	if d, err = placement(placer).answer(placerRouter, lost); err != nil {
		t.Fatal(err)
	}
	placer.holds.unhold(lost.From, lost.Seq)
	placer.holds.unhold(q.From, q.Seq) // ended by the report already: nothing to do
	if byReport, byBound := placer.HoldsEnded(); byReport != 2 || byBound != 1 || onPlacer(d.Worker) != 0 {
		t.Errorf("holds ended by report %d, by bound %d, load %d; want 2, 1, 0", byReport, byBound, onPlacer(d.Worker))
	}
	c := placer.Gossip().Config()
	if hold := placer.holdBound; hold != c.LoadInterval+3*c.ReportLag() {
		t.Errorf("the hold's bound is %v, want a load interval and three report lags", hold)
	}
}

// TestAQuestionNumberedAgainReplacesItsHold: an asker that restarted numbers
// its questions from 1 again while the placer still holds one of its
// earlier life by that number; the new answer's hold replaces the old, so
// the placer counts one request there, not two for as long as the bound.
func TestAQuestionNumberedAgainReplacesItsHold(t *testing.T) {
	reps, _ := tier(t, 2, 1)
	placer, peer := reps[0], reps[1]
	rt := router(t, peer)
	req := rt.Prepare("m", coldBurst(1)[0], 0)
	q := placement(peer).ask(req, allPool(peer))
	placerRouter := router(t, placer)
	for range 2 {
		if _, err := placement(placer).answer(placerRouter, q); err != nil {
			t.Fatal(err)
		}
	}
	if n := placer.Loads().Lookup(1).Local(); n != 1 {
		t.Fatalf("the placer holds %d reservations for one question number, want 1", n)
	}
	placer.holds.unhold(q.From, q.Seq)
	if n := placer.Loads().Lookup(1).Local(); n != 0 {
		t.Fatalf("after the bound the placer holds %d, want 0", n)
	}
}

// TestQuestionsCountedAreTheSettledOnes: a report counts every question
// settled, the ones above an older one still out by number.
func TestQuestionsCountedAreTheSettledOnes(t *testing.T) {
	var q questions
	for range 5 {
		q.ask()
	}
	q.settle(1)
	q.settle(3)
	q.settle(5)
	if c := q.counted(); c.Through != 1 || !slices.Equal(c.Also, []uint64{3, 5}) {
		t.Fatalf("counted %+v, want through 1 and 3, 5", c)
	}
	q.settle(2)
	q.settle(4)
	if c := q.counted(); c.Through != 5 || len(c.Also) != 0 {
		t.Fatalf("counted %+v, want through 5", c)
	}
}

// sharedPrompt is session i's first turn: a system prompt every session
// shares (8 blocks), then a task of its own (2 blocks and a bit).
func sharedPrompt(i int) []byte {
	return fmt.Appendf(bytesOf('s', 8*blockSize), "task %03d: %s", i, bytesOf('a'+byte(i%26), 2*blockSize))
}

// TestANewConversationOnASharedPrefixIsForThePlacer: a first turn whose
// deepest known block is a system prompt other sessions went on past is
// the placer's, though it is a hit; the next turn of a known conversation,
// and a prompt that ends where known ones did (the same prompt again), are
// decided where they arrive.
func TestANewConversationOnASharedPrefixIsForThePlacer(t *testing.T) {
	reps, _ := tier(t, 1, 4)
	r := reps[0]
	rt := router(t, r)
	if _, _, err := r.Decide(rt, rt.Prepare("m", sharedPrompt(0), 0), allPool(r)); err != nil {
		t.Fatal(err)
	}
	next := append(sharedPrompt(0), bytesOf('o', 3*blockSize)...)
	for _, tc := range []struct {
		name   string
		prompt []byte
		want   placing
	}{
		{"another session's first turn on the system prompt", sharedPrompt(1), askPlacer},
		{"the known session's next turn", next, decideHere},
		{"the known session's first turn again", sharedPrompt(0), decideHere},
		{"the system prompt alone, as others began", bytesOf('s', 8*blockSize), decideHere},
	} {
		if got := r.decide.placingOf(rt, rt.Prepare("m", tc.prompt, 0), allPool(r), false); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// longSystem is session i's first turn on a system prompt of 10 blocks
// (the peers announce its block 7, a checkpoint, and not its end), with
// its tokens (one per 4 bytes; the system prompt's the same for every i).
func longSystem(i int, more int) ([]byte, []uint32) {
	text := fmt.Appendf(bytesOf('s', 10*blockSize), "task %03d: %s", i, bytesOf('a'+byte(i%26), 2*blockSize+more))
	return text, sessionTokens(text, 10*blockSize, i)
}

// learnPeers has r learn what a peer announces of its decision of text on
// w: the deepest block and the checkpoints below it.
func learnPeers(r *Replica, rt *affinity.Router, text []byte, w affinity.WorkerID) {
	hashes := rt.Prepare("m", text, 0).Hashes
	for d := range hashes {
		if affinity.IsCheckpoint(d) || d == len(hashes)-1 {
			r.decide.index.Learn(affinity.Fact{Hash: hashes[d], Worker: w, Span: 1})
		}
	}
}

// TestANewConversationOnAPrefixAPeerAnnouncedIsForThePlacer: a replica
// that knows a system prompt only from a peer's decision (the checkpoints
// it announced, at blocks 0, 1, 3 and 7 of a 10-block system prompt) sends
// another session's first turn to the placer, not to the peer's worker as
// that conversation's next turn: a burst of new sessions through a tier
// otherwise put its first turns on the first session's worker (21 of 128
// on one of 8 workers, real processes) before the replicas had recorded a
// first turn of their own. On the engines' events too, though the peer's
// engine holds the whole system prompt, past the checkpoint: an engine
// holds more than a shared prefix only past the peer's next checkpoint.
// The known session's next turn, and a late turn of a conversation that
// an engine holds and the replica knows only the system prompt of, are
// decided where they arrive.
func TestANewConversationOnAPrefixAPeerAnnouncedIsForThePlacer(t *testing.T) {
	reps, _ := tier(t, 1, 4)
	r := reps[0]
	rt := router(t, r)
	first, _ := longSystem(0, 0)
	learnPeers(r, rt, first, 2)
	next := append(append([]byte(nil), first...), bytesOf('o', 3*blockSize)...)
	for _, tc := range []struct {
		name   string
		prompt []byte
		want   placing
	}{
		{"another session's first turn on the peer's system prompt", func() []byte { b, _ := longSystem(1, 0); return b }(), askPlacer},
		{"the peer's session's next turn", next, decideHere},
	} {
		if got := r.decide.placingOf(rt, rt.Prepare("m", tc.prompt, 0), allPool(r), false); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	clk.Step(time.Minute)
	first, firstTokens := longSystem(0, 0)
	learnPeers(r, rt, first, 2)
	ev.stores(2, firstTokens, len(firstTokens)/kvBlock)
	late, lateTokens := longSystem(3, 40*blockSize) // a long conversation the replica has heard nothing of
	ev.stores(3, lateTokens, len(lateTokens)/kvBlock)
	nextTokens := append(append([]uint32(nil), firstTokens...), make([]uint32, 3*blockSize/4)...)
	other, otherTokens := longSystem(1, 0)
	lateNext := append(append([]byte(nil), late...), bytesOf('o', 3*blockSize)...)
	lateNextTokens := append(append([]uint32(nil), lateTokens...), make([]uint32, 3*blockSize/4)...)
	for _, tc := range []struct {
		name   string
		prompt []byte
		tokens []uint32
		want   placing
	}{
		{"another session's first turn, the peer's engine holding the system prompt", other, otherTokens, askPlacer},
		{"the peer's session's next turn, its engine holding the first", next, nextTokens, decideHere},
		{"a long conversation's next turn, its engine holding it, the replica knowing only the system prompt", lateNext, lateNextTokens, decideHere},
	} {
		req := rt.Prepare("m", tc.prompt, 0)
		req.Tokens = tc.tokens
		if got := r.decide.placingOf(rt, req, allPool(r), false); got != tc.want {
			t.Errorf("on events: %s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// sharedTokens is sharedPrompt(i) and its tokens, one per 4 bytes: the
// system prompt's the same for every i.
func sharedTokens(i int) ([]byte, []uint32) {
	text := sharedPrompt(i)
	return text, sessionTokens(text, 8*blockSize, i)
}

// sessionTokens is session i's text as tokens, one per 4 bytes: those of
// its first shared bytes the same for every session.
func sessionTokens(text []byte, shared, i int) []uint32 {
	tokens := make([]uint32, len(text)/4)
	for j := range tokens {
		tokens[j] = uint32(j)
		if j*4 >= shared {
			tokens[j] |= uint32(i+1) << 16
		}
	}
	return tokens
}

// TestOnEventsANewConversationIsForThePlacerAndAKnownOneIsNot: with the
// engines' events, a session's first turn on a shared system prompt is the
// placer's as on the text index, whether the engines hold the prompt, one
// engine alone holds it or every engine evicted it; so is a prompt nobody
// holds or knows, but not one nobody here knows that an engine holds; a
// session's next turn whose earlier turn an engine stored is decided where
// it arrives, though the index here knows only the system prompt (the peer
// that placed it has not said so yet), unless that engine's stream is not
// trusted: then the events know nothing more than the index and the turn is
// the placer's.
func TestOnEventsANewConversationIsForThePlacerAndAKnownOneIsNot(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	clk.Step(time.Minute)
	first, firstTokens := sharedTokens(0)
	decideTokens(t, r, rt, first, firstTokens) // the system prompt forks here once another session goes past it
	ev.stores(1, firstTokens, len(firstTokens)/kvBlock)
	other, otherTokens := sharedTokens(1)
	ev.stores(2, otherTokens, 8*blockSize/4/kvBlock) // the system prompt alone
	next := append(append([]byte(nil), other...), bytesOf('o', 3*blockSize)...)
	nextTokens := append(append([]uint32(nil), otherTokens...), make([]uint32, 3*blockSize/4)...)
	placingFor := func(text []byte, tokens []uint32) placing {
		req := rt.Prepare("m", text, 0)
		req.Tokens = tokens
		return r.decide.placingOf(rt, req, allPool(r), false)
	}
	if got := placingFor(other, otherTokens); got != askPlacer {
		t.Errorf("a new session's first turn, the engines holding the system prompt: %d, want the placer's", got)
	}
	fresh, freshTokens := kvPrompt(20)
	if got := placingFor(fresh, freshTokens); got != askPlacer {
		t.Errorf("a prompt nobody holds or knows: %d, want the placer's", got)
	}
	straight, straightTokens := kvPrompt(21) // an engine got it straight, not through the router
	ev.stores(2, straightTokens, len(straightTokens)/kvBlock)
	if got := placingFor(straight, straightTokens); got != decideHere {
		t.Errorf("a prompt nobody here knows and an engine holds: %d, want decided here", got)
	}
	freshReq := rt.Prepare("m", fresh, 0)
	freshReq.Tokens = freshTokens
	r.decide.placingOf(rt, freshReq, allPool(r), false)
	if q := placement(r).ask(freshReq, allPool(r)); len(q.KV) == 0 {
		t.Error("the question about a prompt nobody knows carries no block keys: the placer would decide it on its index")
	}
	held := ev.held[1]
	ev.held[1] = nil
	if got := placingFor(other, otherTokens); got != askPlacer {
		t.Errorf("a new session's first turn, one engine holding the system prompt: %d, want the placer's", got)
	}
	ev.held[2] = nil
	if got := placingFor(other, otherTokens); got != askPlacer {
		t.Errorf("a new session's first turn on a system prompt the index knows and every engine evicted: %d, want the placer's", got)
	}
	ev.stores(2, otherTokens, 8*blockSize/4/kvBlock)
	ev.held[1] = held
	ev.stores(3, otherTokens, len(otherTokens)/kvBlock) // a peer placed that turn on 3, whose engine stored it
	if got := placingFor(next, nextTokens); got != decideHere {
		t.Errorf("the session's next turn, its first turn stored on an engine: %d, want decided here", got)
	}
	late := append(append([]byte(nil), next...), bytesOf('l', 40*blockSize)...) // the system prompt too little of it for a hit
	lateTokens := append(append([]uint32(nil), nextTokens...), make([]uint32, 40*blockSize/4)...)
	if got := placingFor(late, lateTokens); got != decideHere {
		t.Errorf("a late turn of that session, the index knowing only the system prompt: %d, want decided here", got)
	}
	fourth, fourthTokens := sharedTokens(3)
	fourthLate := append(append([]byte(nil), fourth...), bytesOf('f', 40*blockSize)...)
	fourthLateTokens := append(append([]uint32(nil), fourthTokens...), make([]uint32, 40*blockSize/4)...)
	if got := placingFor(fourthLate, fourthLateTokens); got != askPlacer {
		t.Errorf("a long prompt on the system prompt that no engine holds more of: %d, want the placer's", got)
	}
	ev.trust[3] = kvevents.Unheard
	if got := placingFor(next, nextTokens); got != askPlacer {
		t.Errorf("the same with that engine's stream not trusted: %d, want the placer's", got)
	}
	before := r.KVRouting()
	req := rt.Prepare("m", next, 0)
	req.Tokens = nextTokens
	if got := r.decide.placingOf(rt, req, allPool(r), false); got != askPlacer {
		t.Fatalf("%d, want the placer's", got)
	}
	d, g, err := r.Decide(rt, req, allPool(r)) // as when the placer does not answer
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	after := r.KVRouting()
	if n, c := after.Requests-before.Requests, after.OnEvents+after.OnText-before.OnEvents-before.OnText; n != 1 || c != 3 {
		t.Errorf("asked about then decided, the request counted %d times and %d candidates matched; want 1 and 3", n, c)
	}
	if d.kvKeys == nil {
		t.Error("decided after the question, the request lost its keys")
	}
	third, thirdTokens := sharedTokens(2) // a turn two engines stored, of which the index knows the system prompt
	ev.stores(2, thirdTokens, len(thirdTokens)/kvBlock)
	ev.stores(1, thirdTokens, len(thirdTokens)/kvBlock)
	if got := placingFor(third, thirdTokens); got != decideHere {
		t.Errorf("a prompt two engines stored, the index knowing its system prompt: %d, want decided here", got)
	}
}

// TestOnEventsATurnThePlacerPlacedIsJudgedOnTheEngine: a turn the placer
// placed is judged as one decided here, on its engine's events: its keys
// kept and, where the engine holds what the placer predicted, the engine's
// fact; the engine is told to expect it.
func TestOnEventsATurnThePlacerPlacedIsJudgedOnTheEngine(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	clk.Step(time.Minute)
	text, tokens := kvPrompt(3)
	ev.stores(2, tokens, 4)
	req := rt.Prepare("m", text, 0)
	req.Tokens = tokens
	d, g, err := r.decide.decideOn(rt, req, allPool(r), affinity.Decision{Worker: 2, Hit: true, Matched: 4 * blockSize})
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if d.kvKeys == nil || d.Fact != FactEngine {
		t.Errorf("placed on 2: keys %d, fact %v; want the request's keys and the engine's fact", len(d.kvKeys), d.Fact)
	}
	if !slices.Contains(ev.expected, 2) {
		t.Errorf("engines told to expect work: %v; want 2", ev.expected)
	}
}

// TestThePlacerDecidesAQuestionWithTokensOnTheEnginesEvents: a question
// about a request with tokens carries the engines' block keys, and the
// placer decides it on its engines' events, not on its index, which still
// remembers a worker whose engine has since evicted the prompt: that would
// be a hit predicted on an engine holding none of it.
func TestThePlacerDecidesAQuestionWithTokensOnTheEnginesEvents(t *testing.T) {
	ev := newFakeEvents()
	r, rt, clk := kvCore(t, ev)
	pl, err := r.NewPlacement(PlacementConfig{IsPlacer: func() bool { return true }, Placer: func() string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	text, tokens := kvPrompt(5)
	decideTokens(t, r, rt, text, tokens)
	owner := decideTokens(t, r, rt, text, tokens).Worker // the index remembers owner
	clk.Step(time.Minute)                                // past the reservation
	other := owner%3 + 1
	ev.stores(uint32(other), tokens, len(tokens)/kvBlock) // owner's engine evicted it, other's computed it
	req := rt.Prepare("m", text, 0)
	req.Tokens = tokens
	r.decide.events.use(req)
	q, err := ParseQuestion(pl.ask(req, allPool(r)).AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(q.KV) != len(tokens)/kvBlock || q.Tokens != len(tokens) {
		t.Fatalf("the question carries %d keys of %d tokens, want %d of %d", len(q.KV), q.Tokens, len(tokens)/kvBlock, len(tokens))
	}
	placed, _, err := pl.Serve(rt, q)
	if err != nil {
		t.Fatal(err)
	}
	if placed.Worker != other || !placed.Hit {
		t.Errorf("placed %+v; want a hit on %d, whose engine holds the prompt (the index remembers %d)", placed, other, owner)
	}
	q.KV = nil // as a placer of the version before, or an asker without tokens
	if placed, _, err = pl.Serve(rt, q); err != nil || placed.Worker != owner {
		t.Errorf("without keys placed %+v (%v); want %d, on the index (the test sees the difference)", placed, err, owner)
	}
}
