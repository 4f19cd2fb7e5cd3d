package sim

import (
	"testing"
	"time"
)

func priorityEngine(seqs int) *Engine {
	return NewEngine(Config{MaxNumSeqs: seqs, PriorityScheduling: true})
}

// TestAHigherPriorityRequestWaitsForASlotAndTakesTheFirstThatFrees: as
// in vLLM's v1 scheduler, an interactive request (a lower priority value)
// that finds both slots held by bulk requests preempts neither: it waits,
// and takes the first slot that frees, before a bulk request that was
// queued earlier.
func TestAHigherPriorityRequestWaitsForASlotAndTakesTheFirstThatFrees(t *testing.T) {
	e := priorityEngine(2)
	mustSubmit(t, e, Request{ID: 1, Prompt: text(1, 400), MaxTokens: 20, Priority: 3}, 0)
	mustSubmit(t, e, Request{ID: 2, Prompt: text(2, 400), MaxTokens: 50, Priority: 3}, 0)
	evs := run(e, 100*time.Millisecond)
	at := 100 * time.Millisecond
	mustSubmit(t, e, Request{ID: 4, Prompt: text(4, 64), MaxTokens: 4, Priority: 3}, at)
	mustSubmit(t, e, Request{ID: 3, Prompt: text(3, 64), MaxTokens: 4, Priority: 1}, at)
	next, _ := e.NextEventAt()
	evs = append(evs, e.Advance(next)...)
	if e.Running() != 2 || e.Waiting() != 2 {
		t.Fatalf("running %d, waiting %d: want both bulk requests running and both newcomers waiting",
			e.Running(), e.Waiting())
	}
	evs = append(evs, runAll(t, e)...)
	if e.Preemptions() != 0 {
		t.Fatalf("%d preemptions, want none", e.Preemptions())
	}
	freed := find(t, evs, 1, Done).At
	if inter := find(t, evs, 3, FirstToken).At; inter < freed || inter > freed+60*time.Millisecond {
		t.Fatalf("interactive first token at %v, want within a step or two of the first slot freed at %v", inter, freed)
	}
	if find(t, evs, 4, FirstToken).At < find(t, evs, 3, FirstToken).At {
		t.Fatal("the bulk request queued first took the slot the interactive one was owed")
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
			// 1 started alone and keeps its slot; 4 goes next, before the priority 5 ones
			want = []RequestID{1, 4, 2, 3}
		}
		if len(order) != 4 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] || order[3] != want[3] {
			t.Fatalf("priority scheduling %v: first tokens in the order %v, want %v", priority, order, want)
		}
	}
}
