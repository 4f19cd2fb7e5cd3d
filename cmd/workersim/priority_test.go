package main

import (
	"io"
	"strings"
	"testing"
)

// TestThePriorityFieldNeedsPriorityScheduling: as vLLM, a first come first
// served worker refuses a priority other than 0 with a 400 naming the
// policy, and one run with --scheduling-policy priority takes it.
func TestThePriorityFieldNeedsPriorityScheduling(t *testing.T) {
	body := func(p string) string {
		return `{"prompt":"hello","max_tokens":2,"priority":` + p + `}`
	}
	fcfs := startWorker(t, testConfig())
	for p, want := range map[string]int{"0": 200, "1": 400, "-3": 400, `"high"`: 400} {
		status, text := postText(t, fcfs, body(p))
		if status != want {
			t.Errorf("fcfs, priority %s: %d %s; want %d", p, status, text, want)
		}
		if status == 400 && p != `"high"` && !strings.Contains(text, "scheduling-policy priority") {
			t.Errorf("fcfs, priority %s: the 400 does not name the policy: %s", p, text)
		}
	}
	cfg := testConfig()
	cfg.engine.PriorityScheduling = true
	prio := startWorker(t, cfg)
	for _, p := range []string{"0", "1", "-3"} {
		if status, text := postText(t, prio, body(p)); status != 200 {
			t.Errorf("priority scheduling, priority %s: %d %s", p, status, text)
		}
	}
}

func postText(t *testing.T, w *testWorker, body string) (int, string) {
	t.Helper()
	resp, err := w.client.Post(w.url+pathCompletions, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
