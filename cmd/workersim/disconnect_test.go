package main

import (
	"strings"
	"testing"
)

func cancelled(w *testWorker) func() bool {
	return func() bool { return w.metric("workersim_requests_cancelled_total") == 1 }
}

func TestClientLeavingMidStreamCancelsTheRequest(t *testing.T) {
	cfg := testConfig()
	cfg.timeScale = 10
	w := startWorker(t, cfg)
	conn, r := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x","max_tokens":100000,"stream":true}`)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	conn.Close()
	waitFor(t, "the cancellation to be counted", cancelled(w))
	if running := w.s.driver.stats.running.Load(); running != 0 {
		t.Fatalf("%d requests still running after the client left", running)
	}
}

func TestClientLeavingBeforeNonStreamingAnswerCancelsTheRequest(t *testing.T) {
	cfg := testConfig()
	cfg.timeScale = 10
	w := startWorker(t, cfg)
	conn, _ := rawRequest(t, w.addr, pathChatCompletions,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":100000}`)
	waitFor(t, "the request to run", func() bool { return w.s.driver.stats.running.Load() == 1 })
	conn.Close()
	waitFor(t, "the cancellation to be counted", cancelled(w))
	waitFor(t, "the engine to drop the request", func() bool { return w.s.driver.stats.running.Load() == 0 })
}

func TestClientLeavingBeforeFirstTokenCancelsTheRequest(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	conn, _ := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x","stream":true}`)
	waitFor(t, "the request to run", func() bool { return w.s.driver.stats.running.Load() == 1 })
	conn.Close()
	waitFor(t, "the cancellation to be counted", cancelled(w))
}

func TestFinishedRequestsAreNotCountedAsCancelled(t *testing.T) {
	w := startWorker(t, testConfig())
	conn, r := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x","max_tokens":2,"stream":true}`)
	if events := sseEvents(t, r); len(events) != 3 {
		t.Fatalf("events = %q", events)
	}
	conn.Close()
	w.post(pathCompletions, `{"prompt":"y","max_tokens":1}`)
	if got := w.metric("workersim_requests_cancelled_total"); got != 0 {
		t.Fatalf("cancelled = %v after complete requests", got)
	}
}
