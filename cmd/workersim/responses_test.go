package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// responseObject is the part of a response object the tests read.
type responseObject struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Status             string  `json:"status"`
	Background         bool    `json:"background"`
	Instructions       *string `json:"instructions"`
	MaxOutputTokens    *int    `json:"max_output_tokens"`
	PreviousResponseID *string `json:"previous_response_id"`
	Model              string  `json:"model"`
	Output             []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func (o responseObject) text() string {
	if len(o.Output) != 1 || len(o.Output[0].Content) != 1 {
		return ""
	}
	return o.Output[0].Content[0].Text
}

// respond posts to /v1/responses and expects status.
func (w *testWorker) respond(body string, status int) responseObject {
	w.t.Helper()
	got, _, b := w.post(pathResponses, body)
	if got != status {
		w.t.Fatalf("POST %s %s: %d %s", pathResponses, body, got, b)
	}
	var o responseObject
	decodeInto(w.t, b, &o)
	return o
}

// stored fetches a response with method and path suffix ("" or "/cancel") and expects status.
func (w *testWorker) stored(method, id, suffix string, status int) responseObject {
	w.t.Helper()
	req, _ := http.NewRequest(method, w.url+pathResponses+"/"+id+suffix, nil)
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var o responseObject
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != status {
		w.t.Fatalf("%s %s%s: status %d, want %d (%v, %+v)", method, id, suffix, resp.StatusCode, status, err, o)
	}
	return o
}

func TestResponsesAnswerAResponseObjectNamingTheWorker(t *testing.T) {
	cfg := testConfig()
	cfg.workerID = "gpu-7"
	w := startWorker(t, cfg)
	o := w.respond(`{"model":"sim-model","input":"hello","instructions":"be brief","max_output_tokens":3}`, http.StatusOK)
	tag, ok := strings.CutPrefix(o.ID, "resp_")
	worker, _, _ := strings.Cut(tag, "_")
	if name, err := hex.DecodeString(worker); !ok || err != nil || string(name) != "gpu-7" {
		t.Fatalf("id %q does not name worker gpu-7", o.ID)
	}
	if o.Object != "response" || o.Status != "completed" || o.Model != "sim-model" || o.Instructions == nil ||
		*o.Instructions != "be brief" || o.MaxOutputTokens == nil || *o.MaxOutputTokens != 3 || o.PreviousResponseID != nil {
		t.Fatalf("response = %+v", o)
	}
	if o.Output[0].Type != "message" || o.Output[0].Role != "assistant" || o.Output[0].Content[0].Type != "output_text" ||
		o.text() != " tok tok tok" || !strings.HasPrefix(o.Output[0].ID, "msg_") {
		t.Fatalf("output = %+v", o.Output)
	}
	// "system\nbe brief\nuser\nhello\n" is 26 bytes, 7 tokens.
	if u := o.Usage; u == nil || u.InputTokens != 7 || u.OutputTokens != 3 || u.TotalTokens != 10 {
		t.Fatalf("usage = %+v", o.Usage)
	}
	if other := w.respond(`{"input":"hello"}`, http.StatusOK); other.ID == o.ID || len(other.text()) != 4*defaultMaxTokens {
		t.Fatalf("second response %q (after %q) has %d bytes of text", other.ID, o.ID, len(other.text()))
	}
}

// A request_id names the response it makes, as vLLM takes it: the router
// chooses a stored response's id so that it can seal its owner.
func TestARequestIDNamesTheResponse(t *testing.T) {
	w := startWorker(t, testConfig())
	o := w.respond(`{"model":"sim-model","input":"hello","request_id":"resp_chosen1","metadata":{"kvrouter_owner":"s"}}`, http.StatusOK)
	if o.ID != "resp_chosen1" {
		t.Fatalf("id %q, want the request_id", o.ID)
	}
	if got := w.stored(http.MethodGet, "resp_chosen1", "", http.StatusOK); got.ID != "resp_chosen1" {
		t.Fatalf("stored as %q", got.ID)
	}
}

// TestPreviousResponseContinuesTheConversationFromThePrefixCache: a continuation's prompt is the
// stored conversation (input and output) followed by the new input, so it finds the earlier
// turn in the prefix cache; the instructions are its own.
func TestPreviousResponseContinuesTheConversationFromThePrefixCache(t *testing.T) {
	w := startWorker(t, testConfig())
	first := w.respond(fmt.Sprintf(`{"input":%q,"max_output_tokens":4}`, longPrompt("turn", 4000)), http.StatusOK)
	second := w.respond(fmt.Sprintf(`{"input":[{"role":"user","content":[{"type":"input_text","text":"and then?"}]}],
		"previous_response_id":%q,"max_output_tokens":2}`, first.ID), http.StatusOK)
	// turn 1: "user\n" + 4000 bytes + "\n"; its output "assistant\n tok tok tok tok\n"; then "user\nand then?\n".
	if want := (4006 + 27 + 15 + 3) / 4; second.Usage.InputTokens != want {
		t.Fatalf("continuation has %d input tokens, want %d", second.Usage.InputTokens, want)
	}
	// The first turn's prompt is cached in whole blocks of 16 tokens (its output is not cached).
	if cached, want := second.Usage.InputTokensDetails.CachedTokens, first.Usage.InputTokens/16*16; cached != want {
		t.Fatalf("continuation found %d tokens cached, want the first turn's %d", cached, want)
	}
	if second.PreviousResponseID == nil || *second.PreviousResponseID != first.ID {
		t.Fatalf("previous_response_id = %v", second.PreviousResponseID)
	}
	third := w.respond(fmt.Sprintf(`{"input":"more","instructions":"new rules","previous_response_id":%q}`, second.ID), http.StatusOK)
	if third.Usage.InputTokensDetails.CachedTokens != 0 {
		t.Errorf("instructions put before the history still found %d tokens cached", third.Usage.InputTokensDetails.CachedTokens)
	}
}

// sseEvent is one named server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// namedEvents reads a stream of named events to its end.
func namedEvents(t *testing.T, r *bufio.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var name string
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			ev := sseEvent{name: name}
			if jerr := json.Unmarshal([]byte(v), &ev.data); jerr != nil {
				t.Fatalf("event %q data %q: %v", name, v, jerr)
			}
			events = append(events, ev)
		}
		if err != nil {
			return events
		}
	}
}

func TestResponsesStreamTheEventsTheSDKsRead(t *testing.T) {
	w := startWorker(t, testConfig())
	resp, err := w.client.Post(w.url+pathResponses, "application/json",
		strings.NewReader(`{"input":"hi","max_output_tokens":3,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	events := namedEvents(t, bufio.NewReader(resp.Body))
	want := []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, ev := range events {
		if ev.name != want[i] || ev.data["type"] != want[i] || ev.data["sequence_number"] != float64(i) {
			t.Errorf("event %d = %s %v, want %s numbered %d", i, ev.name, ev.data, want[i], i)
		}
	}
	if d := events[4].data; d["delta"] != " tok" || d["output_index"] != 0.0 || d["content_index"] != 0.0 {
		t.Errorf("delta = %v", d)
	}
	completed, _ := json.Marshal(events[len(events)-1].data["response"])
	var o responseObject
	decodeInto(t, completed, &o)
	if o.Status != "completed" || o.text() != " tok tok tok" || o.Usage == nil || o.Usage.OutputTokens != 3 {
		t.Fatalf("completed response = %s", completed)
	}
	if stored := w.stored(http.MethodGet, o.ID, "", http.StatusOK); stored.Status != "completed" || stored.text() != o.text() {
		t.Fatalf("stored response = %+v", stored)
	}
}

func TestUnknownResponseIDsAre404(t *testing.T) {
	w := startWorker(t, testConfig())
	unstored := w.respond(`{"input":"x","store":false}`, http.StatusOK)
	deleted := w.respond(`{"input":"x"}`, http.StatusOK)
	if got := w.stored(http.MethodDelete, deleted.ID, "", http.StatusOK); got.ID != deleted.ID {
		t.Fatalf("delete answered %+v", got)
	}
	for _, id := range []string{"resp_nope", unstored.ID, deleted.ID} {
		for _, c := range []struct{ method, suffix string }{
			{http.MethodGet, ""}, {http.MethodDelete, ""}, {http.MethodPost, "/cancel"},
			{http.MethodGet, "/input_items"}, {http.MethodGet, "/input"},
		} {
			o := w.stored(c.method, id, c.suffix, http.StatusNotFound)
			if o.Error == nil || o.Error.Type != "invalid_request_error" || o.Error.Code != "response_not_found" {
				t.Errorf("%s %s%s: %+v", c.method, id, c.suffix, o.Error)
			}
		}
	}
	o := w.respond(`{"input":"x","previous_response_id":"resp_nope"}`, http.StatusNotFound)
	if o.Error == nil || w.metric(`workersim_requests_failed_total{reason="response_not_found"}`) != 1 {
		t.Fatalf("unknown previous_response_id: %+v", o)
	}
}

func TestInputItemsListTheResponseInput(t *testing.T) {
	w := startWorker(t, testConfig())
	o := w.respond(`{"input":[{"role":"system","content":"rules"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"x"},{"type":"input_text","text":"b"}]},{"role":"assistant","content":"c"}]}`, http.StatusOK)
	type list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Role    string `json:"role"`
			Content []struct{ Type, Text string }
		} `json:"data"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}
	get := func(suffix string) list {
		_, _, b := w.get(pathResponses + "/" + o.ID + suffix)
		var l list
		decodeInto(t, b, &l)
		return l
	}
	desc := get("/input_items")
	if desc.Object != "list" || len(desc.Data) != 3 || desc.HasMore || desc.Data[0].Role != "assistant" ||
		desc.Data[2].Role != "system" || desc.Data[1].Content[0].Text != "ab" || desc.Data[0].Content[0].Type != "output_text" ||
		desc.FirstID != desc.Data[0].ID || desc.LastID != desc.Data[2].ID {
		t.Fatalf("input_items = %+v", desc)
	}
	if alias := get("/input"); fmt.Sprint(alias) != fmt.Sprint(desc) {
		t.Fatalf("/input = %+v, /input_items = %+v", alias, desc)
	}
	page := get("/input_items?order=asc&limit=2")
	if len(page.Data) != 2 || !page.HasMore || page.Data[0].Role != "system" {
		t.Fatalf("first ascending page = %+v", page)
	}
	if rest := get("/input_items?order=asc&after=" + page.LastID); len(rest.Data) != 1 || rest.Data[0].Role != "assistant" || rest.HasMore {
		t.Fatalf("page after %s = %+v", page.LastID, rest)
	}
}

// TestBackgroundResponseCanBeCancelled: a background response answers at once, queued; cancel
// drops it from the engine and leaves it cancelled; it cannot be cancelled twice.
func TestBackgroundResponseCanBeCancelled(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	o := w.respond(`{"input":"x","background":true}`, http.StatusOK)
	if o.Status != "queued" || !o.Background || o.Usage != nil {
		t.Fatalf("background answer = %+v", o)
	}
	waitFor(t, "the response to reach the engine", func() bool { return inEngine(w) == 1 })
	if got := w.stored(http.MethodGet, o.ID, "", http.StatusOK); got.Status != "queued" {
		t.Fatalf("status while wedged = %q", got.Status)
	}
	if got := w.stored(http.MethodPost, o.ID, "/cancel", http.StatusOK); got.Status != "cancelled" {
		t.Fatalf("cancel answered %+v", got)
	}
	if inEngine(w) != 0 || w.metric("workersim_requests_cancelled_total") != 1 {
		t.Fatalf("after cancel the engine holds %d requests", inEngine(w))
	}
	if got := w.stored(http.MethodGet, o.ID, "", http.StatusOK); got.Status != "cancelled" {
		t.Fatalf("status after cancel = %q", got.Status)
	}
	if got := w.stored(http.MethodPost, o.ID, "/cancel", http.StatusBadRequest); got.Error == nil {
		t.Fatalf("second cancel answered %+v", got)
	}
}

func TestBackgroundResponseCompletes(t *testing.T) {
	w := startWorker(t, testConfig())
	o := w.respond(`{"input":"x","background":true,"max_output_tokens":2}`, http.StatusOK)
	var got responseObject
	waitFor(t, "the background response to complete", func() bool {
		got = w.stored(http.MethodGet, o.ID, "", http.StatusOK)
		return got.Status == "completed"
	})
	if got.text() != " tok tok" || got.Usage == nil || got.Usage.OutputTokens != 2 {
		t.Fatalf("completed background response = %+v", got)
	}
	if again := w.stored(http.MethodPost, o.ID, "/cancel", http.StatusBadRequest); again.Error == nil {
		t.Fatalf("cancel of a completed response answered %+v", again)
	}
	if sync := w.respond(`{"input":"x"}`, http.StatusOK); w.stored(http.MethodPost, sync.ID, "/cancel", http.StatusBadRequest).Error == nil {
		t.Fatal("a synchronous response was cancelled")
	}
}

func TestBackgroundNeedsStoreAndNoStream(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{"input":"x","background":true,"store":false}`, `{"input":"x","background":true,"stream":true}`} {
		if o := w.respond(body, http.StatusBadRequest); o.Error == nil {
			t.Errorf("%s answered %+v", body, o)
		}
	}
}

// TestShutdownFailsBackgroundResponses: stopping the worker ends a background generation, which
// is recorded as failed, and its goroutine (goleak checks at exit).
func TestShutdownFailsBackgroundResponses(t *testing.T) {
	w := startWorker(t, testConfig())
	setFault(t, w, `{"mode":"wedge"}`)
	o := w.respond(`{"input":"x","background":true}`, http.StatusOK)
	waitFor(t, "the response to reach the engine", func() bool { return inEngine(w) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := w.s.responses.store.get(o.ID); !ok || r.status != statusFailed {
		t.Fatalf("after shutdown the response is %+v (found %v)", r.status, ok)
	}
}

func TestResponseStoreKeepsTheMostRecentlyUsed(t *testing.T) {
	cfg := testConfig()
	cfg.maxStoredResponses = 2
	w := startWorker(t, cfg)
	first := w.respond(`{"input":"1"}`, http.StatusOK)
	second := w.respond(`{"input":"2"}`, http.StatusOK)
	w.stored(http.MethodGet, first.ID, "", http.StatusOK)
	third := w.respond(`{"input":"3"}`, http.StatusOK)
	w.stored(http.MethodGet, second.ID, "", http.StatusNotFound)
	w.stored(http.MethodGet, first.ID, "", http.StatusOK)
	w.stored(http.MethodGet, third.ID, "", http.StatusOK)
}

func TestResponsesRefuseBadRequests(t *testing.T) {
	w := startWorker(t, testConfig())
	for _, body := range []string{`{}`, `{"input":5}`, `{"input":[1]}`, `{"input":[{"content":"x"}]}`,
		`{"input":[{"role":"tool","content":"x"}]}`, `{"input":[{"type":"function_call_output","output":"x"}]}`,
		`{"input":[{"role":"user","content":5}]}`, `{"input":"x","max_output_tokens":0}`, `{"input":"x","store":"yes"}`,
		`{"input":"x","instructions":1}`, `{"input":"x","previous_response_id":2}`} {
		if o := w.respond(body, http.StatusBadRequest); o.Error == nil || o.Error.Type != "invalid_request_error" {
			t.Errorf("%s answered %+v", body, o)
		}
	}
}
