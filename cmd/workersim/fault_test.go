package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

func setFault(t *testing.T, w *testWorker, body string) {
	t.Helper()
	if status, _, resp := w.post(pathAdminFault, body); status != http.StatusOK {
		t.Fatalf("POST %s %s: %d %s", pathAdminFault, body, status, resp)
	}
}

func TestFaultAdminShowsAndClearsTheFault(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"errors","rate":0.25}`)
	if _, _, body := w.get(pathAdminFault); string(body) != `{"mode":"errors","rate":0.25,"factor":0,"delay_ms":0,"after":0}` {
		t.Fatalf("GET fault = %s", body)
	}
	if got := w.metric(`workersim_fault{mode="errors"}`); got != 1 {
		t.Fatalf("fault gauge = %v", got)
	}
	setFault(t, w, `{"mode":"none"}`)
	if _, _, body := w.get(pathAdminFault); !strings.Contains(string(body), `"mode":"none"`) {
		t.Fatalf("GET fault after clearing = %s", body)
	}
	for _, bad := range []string{`{"mode":"melt"}`, `{"mode":"errors","rate":2}`, `{"mode":"degrade","factor":0}`,
		`{"mode":"slow_health","delay_ms":-1}`, `{"mode":`, `[]`, `{"rate":1}`} {
		if status, _, _ := w.post(pathAdminFault, bad); status != http.StatusBadRequest {
			t.Errorf("fault %s accepted with %d", bad, status)
		}
	}
}

func TestErrorsFaultFailsInferenceWith500(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"errors","rate":1}`)
	status, h, body := w.post(pathCompletions, `{"prompt":"x","max_tokens":1}`)
	if c := decode(t, body); status != http.StatusInternalServerError || c.Error == nil || h.Get(headerWorkerID) == "" {
		t.Fatalf("status %d, body %s", status, body)
	}
	if status, _, _ := w.get(pathHealth); status != http.StatusOK {
		t.Fatalf("health = %d under the errors fault", status)
	}
	setFault(t, w, `{"mode":"errors","rate":0}`)
	if status, _, body := w.post(pathCompletions, `{"prompt":"x","max_tokens":1}`); status != http.StatusOK {
		t.Fatalf("rate 0 failed a request: %d %s", status, body)
	}
}

func TestErrorsFaultFailsAboutItsRate(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"errors","rate":0.5}`)
	failed := 0
	for range 60 {
		if status, _, _ := w.post(pathCompletions, `{"prompt":"x","max_tokens":1}`); status == http.StatusInternalServerError {
			failed++
		}
	}
	if failed < 15 || failed > 45 {
		t.Fatalf("%d of 60 requests failed at rate 0.5", failed)
	}
	if got := w.metric(`workersim_requests_failed_total{reason="injected_fault"}`); int(got) != failed {
		t.Fatalf("failure metric %v, want %d", got, failed)
	}
}

// TestWedgeHoldsRequestsWithoutAByteUntilCleared: health stays green, a request is accepted but
// gets no byte at all, and it completes once the fault is cleared.
func TestWedgeHoldsRequestsWithoutAByteUntilCleared(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	conn, r := rawRequest(t, w.addr, pathCompletions, `{"prompt":"x","max_tokens":2,"stream":true}`)
	waitFor(t, "the request to reach the engine", func() bool { return w.s.driver.stats.running.Load() == 1 })
	if status, _, _ := w.get(pathHealth); status != http.StatusOK {
		t.Fatalf("health = %d while wedged", status)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := r.ReadByte(); err == nil {
		t.Fatalf("wedged worker sent %q", b)
	}
	conn.SetReadDeadline(time.Time{})
	setFault(t, w, `{"mode":"none"}`)
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after unwedging: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if events := sseEvents(t, bufio.NewReader(resp.Body)); len(events) != 3 {
		t.Fatalf("events after unwedging = %q", events)
	}
}

func TestDegradeSlowsTheEngine(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"degrade","factor":7}`)
	if got := w.s.driver.Config().Slowdown; got != 7 {
		t.Fatalf("engine slowdown = %v, want 7", got)
	}
	setFault(t, w, `{"mode":"none"}`)
	if got := w.s.driver.Config().Slowdown; got != 1 {
		t.Fatalf("engine slowdown after clearing = %v, want 1", got)
	}
	setFault(t, w, `{"mode":"degrade"}`)
	if got := w.s.driver.Config().Slowdown; got != defaultDegradeFactor {
		t.Fatalf("default degrade slowdown = %v", got)
	}
}

func TestSlowHealthDelaysHealthChecks(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"slow_health","delay_ms":300}`)
	start := time.Now()
	status, _, _ := w.get(pathHealth)
	if elapsed := time.Since(start); status != http.StatusOK || elapsed < 300*time.Millisecond {
		t.Fatalf("health answered %d after %v, want 200 after 300ms", status, elapsed)
	}
	if status, _, _ := w.post(pathCompletions, `{"prompt":"x","max_tokens":1}`); status != http.StatusOK {
		t.Fatalf("inference under slow_health = %d", status)
	}
}

func TestCrashFaultExitsWithCode3(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"crash"}`)
	if code := <-w.exits; code != crashExitCode {
		t.Fatalf("exit code %d", code)
	}
	setFault(t, w, `{"mode":"crash","delay_ms":20}`)
	select {
	case code := <-w.exits:
		if code != crashExitCode {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("delayed crash never exited")
	}
}

func TestClearingAPendingCrashDisarmsIt(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"crash","delay_ms":60000}`)
	setFault(t, w, `{"mode":"none"}`)
	w.s.faults.mu.Lock()
	armed := w.s.faults.crash != nil
	w.s.faults.mu.Unlock()
	if armed || len(w.exits) != 0 {
		t.Fatal("crash still armed after clearing the fault")
	}
}

func TestStartTimeFaultApplies(t *testing.T) {
	cfg := testConfig()
	cfg.fault = fault{Mode: faultCrash}
	w := startWorker(t, cfg)
	if code := <-w.exits; code != crashExitCode {
		t.Fatalf("exit code %d", code)
	}
	cfg.fault = fault{Mode: faultErrors, Rate: 1}
	w = startWorker(t, cfg)
	if status, _, _ := w.post(pathCompletions, `{"prompt":"x"}`); status != http.StatusInternalServerError {
		t.Fatalf("start-time errors fault not applied: %d", status)
	}
}
