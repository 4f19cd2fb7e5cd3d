package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/workload"
)

func agentSessions(t *testing.T, turns int) [][]workload.Request {
	t.Helper()
	a := workload.NewAgentic(workload.AgenticConfig{Sessions: 2, Turns: turns, SystemPromptTokens: 64, TaskTokens: 32,
		ObservationTokens: 48, AnswerTokens: 8, Seed: 3})
	sessions := make([][]workload.Request, 2)
	for _, first := range a.Start() {
		turn, ok := first, true
		for ; ok; turn, ok = a.Next(turn.Session) {
			sessions[turn.Session] = append(sessions[turn.Session], turn.Request("m"))
		}
	}
	return sessions
}

// An agent's turns, as chat completions and as Anthropic's Messages API, are the conversations an
// engine renders (the router renders them the same): each turn's prompt starts with the whole
// prompt of the turn before, tools first, and declares the agent's tools.
func TestAnAgentsTurnsShareTheirWholePrefixInBothShapes(t *testing.T) {
	tools := agentTools(20)
	for name, shape := range map[string]struct {
		body   func(workload.Request, []agentTool) []byte
		render func([]byte, *fastjson.Value) ([]byte, error)
	}{
		"chat":     {agentChatBody, sim.AppendChatRequestJSON},
		"messages": {agentMessagesBody, sim.AppendMessagesJSON},
	} {
		for s, session := range agentSessions(t, 4) {
			var before string
			for i, req := range session {
				body := shape.body(req, tools)
				v, err := fastjson.ParseBytes(body)
				if err != nil {
					t.Fatalf("%s session %d turn %d: %v", name, s, i, err)
				}
				prompt, err := shape.render(nil, v)
				if err != nil {
					t.Fatalf("%s session %d turn %d is refused: %v\n%s", name, s, i, err, body)
				}
				if !strings.HasPrefix(string(prompt), before) || len(prompt) <= len(before) {
					t.Fatalf("%s session %d turn %d does not extend the turn before", name, s, i)
				}
				if got := len(v.GetArray("tools")); got != 20 || !strings.HasPrefix(string(prompt), "tools\n") {
					t.Fatalf("%s: %d tools", name, got)
				}
				if calls := strings.Count(string(prompt), "<tool_call:"); calls != i {
					t.Fatalf("%s turn %d makes %d tool calls, want one per turn before", name, i, calls)
				}
				before = string(prompt)
			}
		}
	}
}

func TestAMessagesStreamReadsAnthropicsUsageAndEndsAtMessageStop(t *testing.T) {
	s := completionStream{anthropic: true}
	for _, event := range []string{
		`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":40,"cache_read_input_tokens":60,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"ping"}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"an \"error\" of words"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
		`{"type":"message_stop"}`,
	} {
		if err := s.onEvent([]byte(event)); err != nil {
			t.Fatalf("event %s: %v", event, err)
		}
	}
	if !s.done || s.events != 2 || s.usage == nil || *s.usage != (usage{promptTokens: 100, completionTokens: 2, cachedTokens: 60}) {
		t.Fatalf("done %v events %d usage %+v", s.done, s.events, s.usage)
	}
	s = completionStream{anthropic: true}
	if err := s.onEvent([]byte(`{"type":"error","error":{"type":"api_error","message":"the worker died"}}`)); !errors.Is(err, errStreamError) {
		t.Fatalf("an error event: %v", err)
	}
}

// loadgen agentic on /v1/messages against a server that checks every body as an engine would
// and answers Anthropic's stream: every turn succeeds, with its usage.
func TestAgenticSessionsOnTheMessagesAPI(t *testing.T) {
	var bad, turns atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v, err := fastjson.ParseBytes(body)
		if err == nil {
			_, err = sim.AppendMessagesJSON(nil, v)
		}
		if r.URL.Path != messagesPath || r.Header.Get("anthropic-version") == "" || err != nil || len(v.GetArray("tools")) != 3 {
			bad.Add(1)
			http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, http.StatusBadRequest)
			return
		}
		turns.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`message_start`, `{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":30,"output_tokens":1}}}`,
			`content_block_delta`, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
			`message_delta`, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
			`message_stop`, `{"type":"message_stop"}`,
		} {
			if strings.HasPrefix(ev, "{") {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			} else {
				fmt.Fprintf(w, "event: %s\n", ev)
			}
		}
	}))
	defer server.Close()
	table, err := runApp(t, "agentic", "--target", server.URL, "--endpoint", "messages", "--tools", "3", "--sessions", "2",
		"--turns", "3", "--system-prompt-tokens", "16", "--task-tokens", "8", "--observation-tokens", "8", "--answer-tokens", "2",
		"--think-time", "0s", "--duration", time.Minute.String())
	if err != nil {
		t.Fatal(err)
	}
	if bad.Load() != 0 || turns.Load() != 6 || !strings.Contains(table, "6 (succeeded 6") || !strings.Contains(table, "75.0% (180 of 240 prompt tokens)") {
		t.Fatalf("%d bad bodies, %d turns; table:\n%s", bad.Load(), turns.Load(), table)
	}
}
