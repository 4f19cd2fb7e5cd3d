package sim

import (
	"testing"
	"time"
)

func priorityEngine(seqs int) *Engine {
	return NewEngine(Config{MaxNumSeqs: seqs, PriorityScheduling: true})
}

// TestAHigherPriorityRequestPreemptsTheLowestRunning: two bulk requests
// fill the engine's two slots; an interactive one (a lower priority value)
// is admitted at the next step, the later bulk request preempted, and that
// one resumes once a slot frees, its stream whole: every token once, in
// order, and one first token.
func TestAHigherPriorityRequestPreemptsTheLowestRunning(t *testing.T) {
	e := priorityEngine(2)
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 400), MaxTokens: 50, StreamTokens: true, Priority: 3}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 400), MaxTokens: 50, StreamTokens: true, Priority: 3}, 0)
	evs := run(e, 100*time.Millisecond)
	if e.Running() != 2 {
		t.Fatalf("%d running, want both bulk requests", e.Running())
	}
	at := 100 * time.Millisecond
	mustSubmit(t, e, Request{ID: 3, Prompt: text(3, 64), MaxTokens: 4, Priority: 1}, at)
	next, _ := e.NextEventAt() // preemption is decided when the next step is composed
	evs = append(evs, e.Advance(next)...)
	if e.Running() != 2 || e.Waiting() != 1 || e.Preemptions() != 1 {
		t.Fatalf("running %d, waiting %d, preemptions %d: want the interactive request in, one bulk out",
			e.Running(), e.Waiting(), e.Preemptions())
	}
	evs = append(evs, runAll(t, e)...)
	inter := find(t, evs, 3, FirstToken)
	if d := inter.At - at; d > 60*time.Millisecond {
		t.Fatalf("interactive first token after %v, want within a step or two", d)
	}
	bulkDone := find(t, evs, 2, Done)
	if bulkDone.At < find(t, evs, 3, Done).At {
		t.Fatal("the preempted request finished before the one that preempted it")
	}
	for _, id := range []RequestID{1, 2} {
		if n := count(evs, id, FirstToken); n != 1 {
			t.Fatalf("request %d: %d first tokens, want 1", id, n)
		}
		if n := count(evs, id, Token); n != 49 {
			t.Fatalf("request %d: %d tokens after the first, want 49", id, n)
		}
		last := 0
		for _, ev := range evs {
			if ev.ID == id && ev.Kind == Token {
				if ev.Usage.Completion != last+1 && last != 0 {
					t.Fatalf("request %d: token %d after %d", id, ev.Usage.Completion, last)
				}
				last = ev.Usage.Completion
			}
		}
	}
}

// TestAnEqualOrHigherPriorityRunningRequestIsNotPreempted: a newcomer of
// the same priority waits for a slot, as under first come first served.
func TestAnEqualOrHigherPriorityRunningRequestIsNotPreempted(t *testing.T) {
	e := priorityEngine(1)
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 64), MaxTokens: 20, Priority: 1}, 0)
	run(e, 30*time.Millisecond)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 64), MaxTokens: 2, Priority: 1}, 30*time.Millisecond)
	mustSubmit(t, e, Request{ID: 3, Prompt: text(3, 64), MaxTokens: 2, Priority: 2}, 30*time.Millisecond)
	evs := runAll(t, e)
	if e.Preemptions() != 0 {
		t.Fatalf("%d preemptions, want none", e.Preemptions())
	}
	if find(t, evs, 1, Done).At > find(t, evs, 2, FirstToken).At {
		t.Fatal("the newcomer of the same priority ran before the running request ended")
	}
}

// TestWaitingRequestsGoByPriorityThenArrival: the queue is ordered by
// priority, not arrival; first come first served ignores the field.
func TestWaitingRequestsGoByPriorityThenArrival(t *testing.T) {
	for _, priority := range []bool{false, true} {
		e := NewEngine(Config{MaxNumSeqs: 1, PriorityScheduling: priority})
		mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 64), MaxTokens: 2, Priority: 0}, 0)
		mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 64), MaxTokens: 2, Priority: 5}, 0)
		mustSubmit(t, e, Request{ID: 3, Prompt: text(3, 64), MaxTokens: 2, Priority: 5}, 0)
		mustSubmit(t, e, Request{ID: 4, Prompt: text(4, 64), MaxTokens: 2, Priority: -1}, 0)
		evs := runAll(t, e)
		var order []RequestID
		for _, ev := range evs {
			if ev.Kind == FirstToken {
				order = append(order, ev.ID)
			}
		}
		want := []RequestID{1, 2, 3, 4}
		if priority {
			// 1 started alone, and yields its slot to 4 after its first token, then resumes
			// before the priority 5 ones
			want = []RequestID{1, 4, 2, 3}
		}
		if len(order) != 4 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] || order[3] != want[3] {
			t.Fatalf("priority scheduling %v: first tokens in the order %v, want %v", priority, order, want)
		}
	}
}
