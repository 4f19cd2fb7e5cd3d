package core

import (
	"errors"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/kvrouter/kvrouter/affinity"
)

// placementPair is a placer and an asker on one fake clock, each with its
// side of the protocol: the asker's placer is at "placer".
type placementPair struct {
	t                *testing.T
	clk              *testingclock.FakeClock
	placer, asker    *Replica
	atPlacer, atPeer *Placement
	placerRouter, rt *affinity.Router
}

func newPlacementPair(t *testing.T) *placementPair {
	t.Helper()
	reps, clk := tier(t, 2, 4)
	p := &placementPair{t: t, clk: clk, placer: reps[0], asker: reps[1], placerRouter: router(t, reps[0]), rt: router(t, reps[1])}
	var err error
	if p.atPlacer, err = p.placer.NewPlacement(PlacementConfig{IsPlacer: func() bool { return true },
		Placer: func() string { return "placer" }}); err != nil {
		t.Fatal(err)
	}
	if p.atPeer, err = p.asker.NewPlacement(PlacementConfig{IsPlacer: func() bool { return false },
		Placer: func() string { return "placer" }}); err != nil {
		t.Fatal(err)
	}
	return p
}

// begin starts a new session's first turn (cold everywhere) on the asker.
func (p *placementPair) begin(t *testing.T, session int) (*Asking, Decided) {
	t.Helper()
	a, d, g, err := p.atPeer.Begin(p.rt, p.rt.Prepare("m", coldBurst(8)[session], 0), allPool(p.asker))
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	return a, d
}

// ended is the decision of a request the protocol ended, its guard
// released.
func (p *placementPair) ended(d Decided, g *affinity.Guard, err error) Decided {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
	g.Release()
	return d
}

// TestAnAnsweredQuestionPlacesTheRequestWhereThePlacerChose: a cold
// request's question goes to the placer, whose answer the asker routes on
// and settles, and whose hold the asker's report then ends.
func TestAnAnsweredQuestionPlacesTheRequestWhereThePlacerChose(t *testing.T) {
	p := newPlacementPair(t)
	a, _ := p.begin(t, 0)
	if a == nil || a.To != "placer" || !a.Deadline.Equal(p.clk.Now().Add(PlacerPatience*DefaultPlacerTimeout)) {
		t.Fatalf("a cold request is not asked of the placer by the default bound, patient before its first answer: %+v", a)
	}
	placed, hold, err := p.atPlacer.Serve(p.placerRouter, a.Question)
	if err != nil || hold != p.placer.holdBound {
		t.Fatalf("Serve: %v, hold %v", err, hold)
	}
	d := p.ended(p.atPeer.Answered(a, placed))
	if d.Worker != placed.Worker || d.Via != ViaAsked || !a.Ended() {
		t.Fatalf("decided %d via %v (ended %v), want the placer's %d via asked", d.Worker, d.Via, a.Ended(), placed.Worker)
	}
	if c := p.asker.questions.counted(); c.Through != a.Question.Seq {
		t.Fatalf("the answered question is not settled: %+v", c)
	}
}

// TestASilentPlacerIsNotAskedAgainUntilItsQuietEnds: a question that got
// no answer by its deadline is decided alone, and so is every cold request
// until PlacerQuiet has passed on the clock; then the placer is asked
// again. A refusal is an answer: it does not make the placer quiet.
func TestASilentPlacerIsNotAskedAgainUntilItsQuietEnds(t *testing.T) {
	p := newPlacementPair(t)
	a, _ := p.begin(t, 0)
	p.clk.SetTime(a.Deadline)
	if d := p.ended(p.atPeer.Silent(a)); d.Via != ViaAlone || !a.Ended() {
		t.Fatalf("a question unanswered: decided via %v, want alone", d.Via)
	}
	p.clk.Step(PlacerQuiet - time.Millisecond)
	if a, d := p.begin(t, 1); a != nil || d.Via != ViaAlone {
		t.Fatalf("within the quiet the next cold request is asked (%v) or not alone (%v)", a != nil, d.Via)
	}
	p.clk.Step(time.Millisecond)
	refused, _ := p.begin(t, 2)
	if refused == nil {
		t.Fatal("past the quiet the placer is not asked again")
	}
	p.ended(p.atPeer.Refused(refused))
	if a, _ := p.begin(t, 3); a == nil {
		t.Fatal("a placer that refused is not asked again")
	}
}

// TestAPlacerThatAnsweredAnotherQuestionSinceStaysAsked: of two questions
// put at once, one is answered and the other runs out its bound (it met a
// queue at the placer): the placer is alive, and the next cold request is
// asked of it.
func TestAPlacerThatAnsweredAnotherQuestionSinceStaysAsked(t *testing.T) {
	p := newPlacementPair(t)
	slow, _ := p.begin(t, 0)
	fast, _ := p.begin(t, 1)
	placed, _, err := p.atPlacer.Serve(p.placerRouter, fast.Question)
	if err != nil {
		t.Fatal(err)
	}
	p.clk.Step(time.Millisecond)
	p.ended(p.atPeer.Answered(fast, placed))
	p.clk.SetTime(slow.Deadline)
	p.ended(p.atPeer.Silent(slow))
	if a, _ := p.begin(t, 2); a == nil {
		t.Fatal("a placer that answered since the slow question was put is not asked")
	}
}

// TestAQuestionWaitsLongerForAPlacerThatIsAnswering: a question put to a
// placer not heard from yet (a tier's first burst, or the first after an
// election, met cold), or within PlacerQuiet of its last answer (a burst
// queued at a live placer), waits
// PlacerPatience times the bound; one put later waits the bound.
func TestAQuestionWaitsLongerForAPlacerThatIsAnswering(t *testing.T) {
	p := newPlacementPair(t)
	patient := PlacerPatience * DefaultPlacerTimeout
	first, _ := p.begin(t, 0)
	if !first.Deadline.Equal(p.clk.Now().Add(patient)) {
		t.Fatalf("the first question to a placer waits %v, want %v", first.Deadline.Sub(p.clk.Now()), patient)
	}
	placed, _, err := p.atPlacer.Serve(p.placerRouter, first.Question)
	if err != nil {
		t.Fatal(err)
	}
	p.ended(p.atPeer.Answered(first, placed))
	p.clk.Step(PlacerQuiet - time.Millisecond)
	if a, _ := p.begin(t, 1); !a.Deadline.Equal(p.clk.Now().Add(patient)) {
		t.Fatalf("a question put %v after an answer waits %v, want %v", PlacerQuiet-time.Millisecond,
			a.Deadline.Sub(p.clk.Now()), patient)
	}
	p.clk.Step(time.Millisecond)
	if a, _ := p.begin(t, 2); !a.Deadline.Equal(p.clk.Now().Add(DefaultPlacerTimeout)) {
		t.Fatalf("a question put %v after the last answer waits %v, want the bound", PlacerQuiet, a.Deadline.Sub(p.clk.Now()))
	}
	p.atPeer.cfg.Placer = func() string { return "elected" }
	if a, _ := p.begin(t, 3); !a.Deadline.Equal(p.clk.Now().Add(patient)) {
		t.Fatalf("the first question to a newly elected placer waits %v, want %v", a.Deadline.Sub(p.clk.Now()), patient)
	}
}

// TestOnlyThePlacerServesAndWithoutOneTheAskerDecidesAlone: a replica that
// is not the placer refuses a question; an asker that knows of no placer
// decides a cold request alone at once.
func TestOnlyThePlacerServesAndWithoutOneTheAskerDecidesAlone(t *testing.T) {
	p := newPlacementPair(t)
	a, _ := p.begin(t, 0)
	if _, _, err := p.atPeer.Serve(p.rt, a.Question); !errors.Is(err, ErrNotPlacer) {
		t.Fatalf("a replica that is not the placer served a question: %v", err)
	}
	none, err := p.asker.NewPlacement(PlacementConfig{IsPlacer: func() bool { return false }, Placer: func() string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	b, d, g, err := none.Begin(p.rt, p.rt.Prepare("m", coldBurst(8)[1], 0), allPool(p.asker))
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if b != nil || d.Via != ViaAlone {
		t.Fatalf("without a placer: asked %v, via %v; want decided alone at once", b != nil, d.Via)
	}
}
