package proxy

import (
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// notifyingHealth is recordingHealth whose attempts tell of being stuck only
// through OnStuck: their Stuck channel is nil, so a proxy that waited on it
// would never abandon them.
type notifyingHealth struct{ *recordingHealth }

func (h notifyingHealth) Begin(w affinity.WorkerID) (Attempt, error) {
	a, err := h.recordingHealth.Begin(w)
	if err != nil {
		return nil, err
	}
	return &notifyingAttempt{recordedAttempt: a.(*recordedAttempt), ended: make(chan struct{})}, nil
}

type notifyingAttempt struct {
	*recordedAttempt
	ended chan struct{}
	once  sync.Once
}

func (a *notifyingAttempt) Stuck() <-chan struct{} { return nil }

func (a *notifyingAttempt) End(o Outcome) {
	a.recordedAttempt.End(o)
	a.once.Do(func() { close(a.ended) })
}

func (a *notifyingAttempt) OnStuck(f func()) {
	go func() {
		select {
		case <-a.recordedAttempt.stuck:
			f()
		case <-a.ended:
		}
	}()
}

// TestAnAttemptStuckThroughOnStuckIsRetriedElsewhere: with a health tracker
// that calls back when an attempt is stuck, the proxy keeps no goroutine
// waiting per attempt and still abandons the stuck one for another worker.
func TestAnAttemptStuckThroughOnStuckIsRetriedElsewhere(t *testing.T) {
	stuck, good := startFake(t, "stuck"), startFake(t, "good")
	stuck.Set(fakeworker.Hold())
	health := notifyingHealth{newRecordingHealth()}
	r := startRouterHealth(t, Config{}, health, stuck, good)
	done := make(chan string, 1)
	go func() {
		resp, body := post(t, r.url, "/v1/completions", completion("x", false))
		done <- resp.Header.Get("x-worker-id") + " " + body
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return stuck.Inference.Load() == 1 }, "the request on the stuck worker")
	health.judgeStuck(1)
	if got := <-done; !strings.HasPrefix(got, "good ") {
		t.Fatalf("answer %q, want the good worker's", got)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return stuck.HungUp.Load() == 1 }, "the stuck worker's request to be cancelled")
	if r.totalLoad() != 0 {
		t.Fatalf("load %d", r.totalLoad())
	}
}
