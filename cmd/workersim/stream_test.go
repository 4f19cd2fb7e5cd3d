package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// sseEvents reads the data lines of an SSE stream up to [DONE] or the end of the stream.
func sseEvents(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	var events []string
	for {
		line, err := r.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			events = append(events, data)
			if data == "[DONE]" {
				return events
			}
		}
		if err != nil {
			return events
		}
	}
}

func TestStreamSendsOneChunkPerTokenThenUsageAndDone(t *testing.T) {
	w := startWorker(t, testConfig())
	resp, err := w.client.Post(w.url+pathChatCompletions, "application/json", strings.NewReader(
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	events := sseEvents(t, bufio.NewReader(resp.Body))
	if len(events) != 6 || events[5] != "[DONE]" {
		t.Fatalf("want 4 token chunks, a usage chunk and [DONE], got %q", events)
	}
	type chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        struct{ Role, Content string } `json:"delta"`
			FinishReason *string                        `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	for i, ev := range events[:5] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %d %q: %v", i, ev, err)
		}
		switch {
		case i < 4 && (len(c.Choices) != 1 || c.Choices[0].Delta.Content != " tok"):
			t.Errorf("chunk %d carries no token: %s", i, ev)
		case i == 0 && c.Choices[0].Delta.Role != "assistant":
			t.Errorf("first chunk has no role: %s", ev)
		case i < 3 && c.Choices[0].FinishReason != nil:
			t.Errorf("chunk %d finishes early: %s", i, ev)
		case i == 3 && (c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length"):
			t.Errorf("last token chunk lacks finish_reason length: %s", ev)
		case i == 4 && (len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 4):
			t.Errorf("usage chunk = %s", ev)
		}
	}
}

func TestStreamWithoutIncludeUsageHasNoUsageChunk(t *testing.T) {
	w := startWorker(t, testConfig())
	conn, r := rawRequest(t, w.addr, pathCompletions, `{"prompt":"hi","max_tokens":2,"stream":true}`)
	defer conn.Close()
	events := sseEvents(t, r)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" || strings.Contains(strings.Join(events, ""), `"usage"`) {
		t.Fatalf("events = %q", events)
	}
}

// TestStreamRelaysEventsIncrementally stops the engine's clock right after the first token: the
// client must receive that token's event although the stream is far from done, so the worker
// flushes event by event instead of buffering.
func TestStreamRelaysEventsIncrementally(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	cfg := testConfig()
	cfg.timeScale = 1
	w := startWorkerOn(t, cfg, clk)
	conn, r := rawRequest(t, w.addr, pathCompletions, `{"prompt":"abcd","max_tokens":3,"stream":true}`)
	waitFor(t, "the request to run", func() bool { return w.s.driver.stats.running.Load() == 1 })
	// The engine's timer is armed from a reading of the clock; moved before that, the clock
	// would put the wake-up late by the step.
	waitFor(t, "the engine's timer", func() bool { return clk.Waiters() == 1 })
	clk.Step(cfg.engine.PrefillCost(1)) // exactly the first token's time
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var first []string
	for len(first) == 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no event while the engine stands at its first token: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			first = append(first, data)
		}
	}
	if !strings.Contains(first[0], `"text":" tok"`) {
		t.Fatalf("first event = %s", first[0])
	}
	waitFor(t, "the engine's timer for the next token", func() bool { return clk.Waiters() == 1 })
	clk.Step(time.Second)
	if events := sseEvents(t, r); len(events) != 3 || events[2] != "[DONE]" {
		t.Fatalf("rest of the stream = %q, want two more tokens' events and [DONE]", events)
	}
}
