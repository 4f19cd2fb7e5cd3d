package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testwait"
)

// TestPreemptionByResumeOnAWorkersimOfOneSequence: on real processes, a
// workersim of one sequence under vLLM's priority scheduling behind a
// router that lends interactive's reserved slot and takes it back by
// preemption. Two streams of the default class fill the engine (one runs,
// one waits at the engine, which teaches the router the engine's bound);
// an interactive request is answered while the running stream still has
// most of its tokens to go, and both streams read the text of an
// uninterrupted run token for token, with one id and the whole usage.
func TestPreemptionByResumeOnAWorkersimOfOneSequence(t *testing.T) {
	router, workersim := binaries(t)
	_, worker := startWorkersim(t, workersim, "w1", "--time-scale", "8", "--text-seed", "11", "--max-num-seqs", "1",
		"--scheduling-policy", "priority")
	url := startRouterProcess(t, router, "--worker-urls", worker, "--priority-reserved", "interactive=1", "--engine-priority",
		"--lend-reserved-slots", "--preempt-by-resume")
	testwait.Eventually(t, 20*time.Second, func() bool { return healthy(t, url, worker) }, "the worker healthy")
	body := `{"model":"sim-model","prompt":"once upon a time in a land far away","max_tokens":8000,"stream":true,"stream_options":{"include_usage":true}}`
	want := streamAll(t, url, "/v1/completions", body)

	_, first := openStream(t, url, "/v1/completions", body)
	running := spliced{ids: map[string]bool{}, created: map[int64]bool{}}
	running.readEvents(t, first, 2)
	second := make(chan spliced, 1)
	go func() { second <- streamAll(t, url, "/v1/completions", body) }()
	testwait.Eventually(t, 20*time.Second, func() bool { return metric(t, url, "vllm_router_admission_limit") == 1 },
		"the router learning the engine's bound of one")
	firstDone := make(chan error, 1)
	go func() { _, err := running.read(first, -1); firstDone <- err }()

	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"model":"sim-model","prompt":"a quick question","max_tokens":8}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-priority", "interactive")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the interactive request: %d", resp.StatusCode)
	}
	select {
	case <-firstDone:
		t.Fatal("the running stream ended before the interactive request was answered: it did not give way")
	default:
	}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	sameAsUninterrupted(t, running, want)
	sameAsUninterrupted(t, <-second, want)
	if n := metric(t, url, `vllm_router_preemptions_total{result="resumed"}`); n < 1 {
		t.Fatalf("%v preemptions resumed, want at least the one", n)
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		return metric(t, url, `vllm_router_admission_in_flight{class="default"}`) == 0 &&
			metric(t, url, `vllm_router_admission_in_flight{class="interactive"}`) == 0
	}, "every admission slot given back")
}
