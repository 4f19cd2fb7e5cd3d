package main

import (
	"bufio"
	"context"
	"net/http"
	"testing"
	"time"
)

// TestShutdownEndsRequestsInFlight: a wedged worker holding a streaming and a non-streaming
// request still shuts down promptly; the waiting client is told 503.
func TestShutdownEndsRequestsInFlight(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	_, plain := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x"}`)
	streamConn, _ := rawRequest(t, w.addr, pathCompletions, `{"prompt":"y","stream":true}`)
	defer streamConn.Close()
	waitFor(t, "both requests to reach the engine", func() bool {
		return w.s.driver.stats.running.Load()+w.s.driver.stats.waiting.Load() == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(plain), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request in flight at shutdown answered %d, want 503", resp.StatusCode)
	}
}
