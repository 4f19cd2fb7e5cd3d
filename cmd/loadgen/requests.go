package main

import (
	"bufio"
	"encoding/json"
	"os"
)

// requestLine is one finished request in --requests-json: enough to read a tail request by
// request (which worker served the slow ones, and whether they were cache hits).
type requestLine struct {
	StartedMS    float64 `json:"started_ms"`           // from the start of the run
	Session      int     `json:"session"`              // agentic: session number; replay: record index
	Turn         int     `json:"turn"`                 // agentic turn; -1 for replay
	Target       int     `json:"target"`               // index of the target that answered
	Worker       string  `json:"worker"`               // x-worker-id; "unknown" when absent
	Model        string  `json:"model,omitempty"`      // the request's "model" (a session's adapter, say)
	RequestID    string  `json:"request_id,omitempty"` // x-request-id: the router's log line of it
	Status       int     `json:"status"`
	Error        string  `json:"error,omitempty"` // error kind; empty for a success
	TTFTMS       float64 `json:"ttft_ms"`
	LatencyMS    float64 `json:"latency_ms"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
}

// lineOf is r as a requestLine.
func lineOf(r result) requestLine {
	l := requestLine{
		StartedMS: round3(milliseconds(r.dispatched)), Session: r.id, Turn: r.turn, Target: r.target,
		Worker: workerKey(r.worker), Model: r.model, RequestID: r.requestID, Status: r.status, Error: r.errKind,
		TTFTMS: round3(milliseconds(r.ttft)), LatencyMS: round3(milliseconds(r.latency)),
	}
	if r.usage != nil {
		l.PromptTokens, l.CachedTokens = r.usage.promptTokens, r.usage.cachedTokens
	}
	return l
}

// writeRequests writes lines to path, one JSON object per line, in the order they finished.
func writeRequests(path string, lines []requestLine) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
