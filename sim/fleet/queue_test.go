package fleet

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestAgendaPopsByTimeThenInsertionOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var q agenda
	var want []event
	for i := range 2000 {
		e := event{at: time.Duration(rnd.IntN(50)), target: i}
		q.push(e)
		want = append(want, e)
		if rnd.IntN(4) == 0 { // interleave pops with pushes
			got := q.pop()
			want = removeEarliest(t, want, got)
		}
	}
	for q.len() > 0 {
		want = removeEarliest(t, want, q.pop())
	}
	if len(want) != 0 {
		t.Fatalf("%d events never popped", len(want))
	}
}

// removeEarliest checks that got is the earliest of pending by (at, push
// order) and removes it.
func removeEarliest(t *testing.T, pending []event, got event) []event {
	t.Helper()
	best := 0
	for i, e := range pending {
		if e.at < pending[best].at {
			best = i
		}
	}
	if pending[best].target != got.target {
		t.Fatalf("popped event %d at %v, want event %d at %v", got.target, got.at, pending[best].target, pending[best].at)
	}
	return slices.Delete(pending, best, best+1)
}
