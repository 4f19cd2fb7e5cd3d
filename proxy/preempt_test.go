package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// oneSlotEngine is a fake engine of one sequence, as vLLM v1 runs one that
// preempts nothing for a waiting request: a request waits for the slot, in
// arrival order, then a stream gets textEngine's tokens (a prompt carrying
// k of them goes on from <k:c>), one a millisecond, and the slot frees when
// the stream ends or its client hangs up. A request that does not stream
// is answered whole once it has the slot, at once, or when the worker's
// gate opens if its prompt starts "hold". With refuse, a continuation (a
// prompt carrying tokens) is answered a 400.
func oneSlotEngine(refuse bool) fakeworker.Behaviour {
	slot := make(chan struct{}, 1)
	return func(e *fakeworker.Exchange) {
		req, ok := readCompletion(e)
		if !ok {
			return
		}
		if refuse && strings.Contains(req.Prompt, "<") {
			e.JSON(400, `{"error":{"message":"continue_final_message is not supported"}}`)
			return
		}
		slot <- struct{}{}
		defer func() { <-slot }()
		if !req.Stream {
			if strings.HasPrefix(req.Prompt, "hold") && e.WaitHangUp() {
				return
			}
			e.JSON(200, fakeworker.Completion(e.Worker.Name))
			return
		}
		from := strings.Count(req.Prompt, "<")
		if e.StartStream() != nil {
			return
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := from; i < from+req.MaxTokens; i++ {
			<-tick.C
			if e.Event(textEvent(req, from, i)) != nil {
				return // hung up: the slot frees
			}
		}
		_ = e.EndStream()
	}
}

// preemptingRouter is a router in front of w, an engine of one slot that
// the saturation signal reports full, with interactive's one reserved slot
// lent to bulk and taken back by preemption; cfg's changes, if any, apply.
func preemptingRouter(t *testing.T, w *fakeworker.Worker, change ...func(*Config)) *testRouter {
	t.Helper()
	cfg := classesConfig()
	cfg.Admission.Reserved = map[string]int{"interactive": 1}
	cfg.Admission.LendReserved, cfg.Admission.PreemptByResume = true, true
	cfg.Migration = DefaultMigration()
	for _, c := range change {
		c(&cfg)
	}
	r := startSaturated(t, cfg, w)
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Limit == 1 }, "the engine's limit")
	return r
}

// postInteractive sends a completion of prompt, not streamed, in the
// interactive class, and returns its status.
func postInteractive(t *testing.T, url, prompt string) int {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions",
		strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":8}`, prompt)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-priority", "interactive")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// bulkThenInteractive opens a bulk stream of n tokens through r, reads its
// first two events (it streams: it holds the engine's one slot), goes on
// reading it to its end in the background (bulkDone), and sends an
// interactive request, which must be answered.
func bulkThenInteractive(t *testing.T, r *testRouter, n int) (got *sseRead, bulkDone chan error) {
	t.Helper()
	stream := openBulk(t, r.url, "bulk", "bulk-a: the story so far", n)
	got = &sseRead{}
	if err := got.read(stream, 2); err != nil {
		t.Fatal(err)
	}
	bulkDone = make(chan error, 1)
	go func() { bulkDone <- got.read(stream, -1) }()
	if status := postInteractive(t, r.url, "interactive: a question"); status != http.StatusOK {
		t.Fatalf("the interactive request: %d", status)
	}
	return got, bulkDone
}

// TestPreemptionByResumeGivesTheSlotBackAtOnceAndTheBulkStreamLosesNothing:
// a bulk stream holds the engine's one slot, lent to it; an interactive
// request takes the slot back and is answered while the bulk stream still
// runs (without preemption it waits for the stream's 3,000 tokens), and
// the bulk client reads one whole stream: every token once, in order, one
// id, no error, every load and slot given back.
func TestPreemptionByResumeGivesTheSlotBackAtOnceAndTheBulkStreamLosesNothing(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(oneSlotEngine(false))
	r := preemptingRouter(t, w)
	const n = 3000
	got, bulkDone := bulkThenInteractive(t, r, n)
	select {
	case <-bulkDone:
		t.Fatal("the bulk stream ended before the interactive request was answered: it did not give its slot way")
	default:
	}
	if err := <-bulkDone; err != nil {
		t.Fatal(err)
	}
	if got.text != tokensText(n, 'b') || !got.done || got.errors != 0 || len(got.ids) != 1 {
		t.Fatalf("the bulk stream: %d bytes of text (want %d), done %v, %d errors, ids %v", len(got.text), len(tokensText(n, 'b')),
			got.done, got.errors, got.ids)
	}
	if !strings.Contains(w.LastBody(), `"prompt":"bulk-a: the story so far<0:b>`) {
		t.Fatalf("the worker's last request is not the bulk stream's continuation: %.200s", w.LastBody())
	}
	text := metricsText(r)
	for _, want := range []string{`vllm_router_preemptions_total{result="asked"} 1`, `vllm_router_preemptions_total{result="resumed"} 1`,
		`vllm_router_stream_migrations_total{result="resumed"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	testwait.Eventually(t, waitDeadline, func() bool {
		st := r.proxy.AdmissionStats()
		return r.totalLoad() == 0 && st.InFlight == 0 && st.Queued == 0
	}, "every load and admission slot released")
}

// TestAPreemptedStreamWhoseClientLeavesWhileItWaitsHoldsNothing: the bulk
// stream gives way and waits to resume behind an interactive request that
// holds the slot; its client leaves meanwhile. Its place in the queue goes,
// nothing is sent for it again, and every load and slot is given back.
func TestAPreemptedStreamWhoseClientLeavesWhileItWaitsHoldsNothing(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(oneSlotEngine(false))
	r := preemptingRouter(t, w)
	body := `{"model":"m","prompt":"bulk-a: the story so far","max_tokens":3000,"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("x-priority", "bulk")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stream := bufio.NewReader(resp.Body)
	got := &sseRead{}
	if err := got.read(stream, 2); err != nil {
		t.Fatal(err)
	}
	go func() { _ = got.read(stream, -1) }()
	answered := make(chan int, 1)
	go func() { answered <- postInteractive(t, r.url, "hold: a question") }()
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 1 && w.Inference.Load() == 2 },
		"the bulk stream waiting to resume, the interactive request at the worker")
	sent := w.Inference.Load()
	resp.Body.Close() // the client leaves
	testwait.Eventually(t, waitDeadline, func() bool { return r.proxy.AdmissionStats().Queued == 0 }, "its place in the queue gone")
	w.Open()
	if s := <-answered; s != http.StatusOK {
		t.Fatalf("the interactive request: %d", s)
	}
	testwait.Eventually(t, waitDeadline, func() bool {
		st := r.proxy.AdmissionStats()
		return r.totalLoad() == 0 && st.InFlight == 0
	}, "every load and admission slot released")
	if n := w.Inference.Load(); n != sent {
		t.Fatalf("%d requests reached the worker after the client left, want none", n-sent)
	}
	if text := metricsText(r); !strings.Contains(text, `vllm_router_preemptions_total{result="failed"} 1`) {
		t.Fatal("the preemption that could not resume is not counted failed")
	}
}

// TestAPreemptedStreamThatTheEngineRefusesToContinueFailsVisibly: the bulk
// stream gives way, and the engine answers its continuation with a 400.
// The bulk client gets an error event and no clean end, the engine's
// answer is not passed on as the stream's, and every load and slot is
// given back.
func TestAPreemptedStreamThatTheEngineRefusesToContinueFailsVisibly(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(oneSlotEngine(true))
	r := preemptingRouter(t, w)
	got, bulkDone := bulkThenInteractive(t, r, 3000)
	if err := <-bulkDone; err != nil {
		t.Fatal(err)
	}
	if got.done || got.errors != 1 || strings.Contains(got.text, "continue_final_message") {
		t.Fatalf("the refused stream: done %v, %d error events, text %.80q; want one error event and no clean end", got.done, got.errors, got.text)
	}
	if text := metricsText(r); !strings.Contains(text, `vllm_router_preemptions_total{result="failed"} 1`) {
		t.Fatal("the preemption whose continuation was refused is not counted failed")
	}
	testwait.Eventually(t, waitDeadline, func() bool {
		st := r.proxy.AdmissionStats()
		return r.totalLoad() == 0 && st.InFlight == 0 && st.Queued == 0
	}, "every load and admission slot released")
}

// TestAPreemptedStreamWhoseDeadlinePassesWhileItWaitsFailsVisibly: the bulk
// stream gives way behind an interactive request that holds the slot, and
// its request's deadline (--request-timeout-secs) passes while it waits to
// resume. Its client gets an error event and no clean end, its place in
// the queue goes, and every load and slot is given back.
func TestAPreemptedStreamWhoseDeadlinePassesWhileItWaitsFailsVisibly(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(oneSlotEngine(false))
	r := preemptingRouter(t, w, func(c *Config) { c.RequestTimeout = time.Second })
	stream := openBulk(t, r.url, "bulk", "bulk-a: the story so far", 3000)
	got := &sseRead{}
	// 300 tokens, a millisecond each: the interactive request's own
	// deadline comes that much after the stream's.
	if err := got.read(stream, 300); err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() { answered <- postInteractive(t, r.url, "hold: a question") }()
	for got.errors == 0 && !got.done { // up to the error event, read as it comes
		before := len(got.text)
		if err := got.read(stream, 1); err != nil {
			t.Fatal(err)
		}
		if len(got.text) == before && got.errors == 0 && !got.done {
			break // the stream ended without an event
		}
	}
	if got.done || got.errors != 1 {
		t.Fatalf("the stream whose deadline passed: done %v, %d error events; want one error event and no clean end", got.done, got.errors)
	}
	if strings.Contains(metricsText(r), `error_type="upstream_timeout"} 1`) {
		t.Fatal("the stream failed only once the interactive request timed out: its wait did not end at its own deadline")
	}
	if err := got.read(stream, -1); err != nil || got.done {
		t.Fatalf("after the error event: %v, done %v; want the end of the body, no [DONE]", err, got.done)
	}
	if text := metricsText(r); !strings.Contains(text, `vllm_router_preemptions_total{result="failed"} 1`) {
		t.Fatal("the preemption whose deadline passed is not counted failed")
	}
	w.Open()
	<-answered // its own deadline may have passed too: its status is not this test's
	testwait.Eventually(t, waitDeadline, func() bool {
		st := r.proxy.AdmissionStats()
		return r.totalLoad() == 0 && st.InFlight == 0 && st.Queued == 0
	}, "every load and admission slot released")
}
