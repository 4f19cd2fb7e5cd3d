package sim

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// text returns n bytes of text unique to seed, so that prompts of different seeds share no block.
func text(seed, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "s%d-w%d ", seed, i)
	}
	return b.Bytes()[:n]
}

// run advances the engine through every event up to limit and returns the events.
func run(e *Engine, limit time.Duration) []Event {
	var out []Event
	for {
		at, ok := e.NextEventAt()
		if !ok || at > limit {
			return out
		}
		out = append(out, e.Advance(at)...)
	}
}

// runAll advances the engine until it is idle.
func runAll(t *testing.T, e *Engine) []Event {
	t.Helper()
	evs := run(e, time.Duration(1<<62))
	if e.Running()+e.Waiting() != 0 {
		t.Fatalf("engine idle with %d running, %d waiting", e.Running(), e.Waiting())
	}
	return evs
}

func find(t *testing.T, evs []Event, id RequestID, kind EventKind) Event {
	t.Helper()
	for _, ev := range evs {
		if ev.ID == id && ev.Kind == kind {
			return ev
		}
	}
	t.Fatalf("no %v event for request %d in %v", kind, id, evs)
	return Event{}
}

func count(evs []Event, id RequestID, kind EventKind) int {
	n := 0
	for _, ev := range evs {
		if ev.ID == id && ev.Kind == kind {
			n++
		}
	}
	return n
}

func mustSubmit(t *testing.T, e *Engine, r Request, now time.Duration) {
	t.Helper()
	if err := e.Submit(r, now); err != nil {
		t.Fatalf("submit %d: %v", r.ID, err)
	}
}

// ttft submits one request to a fresh or given engine at time zero and returns its first token
// time.
func ttft(t *testing.T, e *Engine, r Request, at time.Duration) (time.Duration, Usage) {
	t.Helper()
	mustSubmit(t, e, r, at)
	ev := find(t, runAll(t, e), r.ID, FirstToken)
	return ev.At - at, ev.Usage
}
