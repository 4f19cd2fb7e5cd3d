package main

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/kvevents"
)

// oracleMatched asks the worker's oracle endpoint how many leading blocks of tokens it holds.
func oracleMatched(t *testing.T, w *testWorker, tokens []uint32) int {
	t.Helper()
	keys := kvevents.AppendKeys(nil, kvevents.Seed(""), tokens, w.s.cfg.engine.BlockTokens)
	body, _ := json.Marshal(keys)
	status, _, answer := w.post(pathKVOracle, string(body))
	if status != 200 {
		t.Fatalf("oracle: status %d: %s", status, answer)
	}
	var r struct{ Matched int }
	if err := json.Unmarshal(answer, &r); err != nil {
		t.Fatal(err)
	}
	return r.Matched
}

// The oracle endpoint says at once, with no subscriber between, what the engine will find cached:
// after a store, through evictions (and while its events are muted), and after a reset.
func TestTheKVOracleSaysWhatTheEngineFindsCachedNow(t *testing.T) {
	w, _ := kvWorker(t, 48*16)
	bt := w.s.cfg.engine.BlockTokens
	first := words(1, 1500)
	tokens := tokenize(t, w, first)
	if n := oracleMatched(t, w, tokens); n != 0 {
		t.Fatalf("a cold prompt: the oracle matches %d blocks", n)
	}
	cachedTokens(t, w, first)
	full := (len(tokens) - 1) / bt
	if n := oracleMatched(t, w, tokens); n != len(tokens)/bt {
		t.Fatalf("after the prompt ran the oracle matches %d blocks, want %d", n, len(tokens)/bt)
	}
	if status, _, body := w.post(pathAdminFault, `{"mode":"mute_kv_events"}`); status != 200 {
		t.Fatalf("fault: %d %s", status, body)
	}
	for i := range 4 {
		cachedTokens(t, w, words(10+i, 1500))
	}
	evictedAsMatched(t, w, first, full, oracleMatched(t, w, tokens), "the oracle")
	if status, _, body := w.post(pathResetPrefixCache, ""); status != 200 {
		t.Fatalf("reset: %d %s", status, body)
	}
	if n := oracleMatched(t, w, tokens); n != 0 {
		t.Errorf("after a reset the oracle matches %d blocks", n)
	}
}

// A peer outside loopback is refused (the request is built in memory: nothing is dialed), and so
// is a body that is not an array of keys.
func TestTheKVOracleAnswersLoopbackPeersOnly(t *testing.T) {
	w, _ := kvWorker(t, 48*16)
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(pathKVOracle)
	req.SetBodyString(`[1,2]`)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 4000}, nil)
	w.s.handle(&ctx)
	if ctx.Response.StatusCode() != fasthttp.StatusForbidden {
		t.Errorf("a peer at 10.0.0.7: status %d, want 403", ctx.Response.StatusCode())
	}
	for _, body := range []string{`{}`, `[1,"x"]`, `[-1]`, `not json`} {
		if status, _, _ := w.post(pathKVOracle, body); status != 400 {
			t.Errorf("%s: status %d, want 400", body, status)
		}
	}
}
