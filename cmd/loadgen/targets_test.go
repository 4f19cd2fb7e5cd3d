package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// closedURL is the URL of a loopback port that was just listening and is closed: connecting to
// it is refused, as to a replica that went away.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return url
}

func newTargetsClient(t *testing.T, targets ...string) *client {
	t.Helper()
	c, err := newClient(clientConfig{targets: targets, timeout: time.Minute}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

func TestClientSpreadsRequestsOverItsTargets(t *testing.T) {
	a, b := newFakeServer(t, 1), newFakeServer(t, 1)
	c := newTargetsClient(t, a.url, b.url)
	perTarget := make([]int, 2)
	for range 200 {
		res := c.do(context.Background(), testRequest(), nil)
		if !res.ok() {
			t.Fatalf("request failed: %s %v", res.errKind, res.err)
		}
		perTarget[res.target]++
	}
	if len(a.requests()) < 60 || len(b.requests()) < 60 {
		t.Fatalf("servers took %d and %d of 200 requests: not spread at random", len(a.requests()), len(b.requests()))
	}
	if perTarget[0] != len(a.requests()) || perTarget[1] != len(b.requests()) {
		t.Fatalf("results name targets %v, servers saw %d and %d", perTarget, len(a.requests()), len(b.requests()))
	}
	if n := c.failovers.Load(); n != 0 {
		t.Fatalf("%d failovers between two live targets", n)
	}
}

func TestClientFailsOverFromATargetThatRefusesConnections(t *testing.T) {
	live := newFakeServer(t, 1)
	c := newTargetsClient(t, closedURL(t), live.url, closedURL(t))
	for range 60 {
		res := c.do(context.Background(), testRequest(), nil)
		if !res.ok() || res.target != 1 {
			t.Fatalf("request failed or answered by target %d: %s %v", res.target, res.errKind, res.err)
		}
	}
	if len(live.requests()) != 60 {
		t.Fatalf("the live target saw %d of 60 requests", len(live.requests()))
	}
	if n := c.failovers.Load(); n < 20 {
		t.Fatalf("%d failovers with two of three targets refusing", n)
	}
}

// dropper is a loopback server that reads each request and closes the
// connection without a byte of answer, as a replica dying mid-request would.
func dropper(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = conn.Read(buf)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

func TestClientFailsOverFromATargetThatDropsTheConnection(t *testing.T) {
	live := newFakeServer(t, 1)
	c := newTargetsClient(t, dropper(t), live.url)
	for range 40 {
		if res := c.do(context.Background(), testRequest(), nil); !res.ok() || res.target != 1 {
			t.Fatalf("request failed or answered by target %d: %s %v", res.target, res.errKind, res.err)
		}
	}
	if c.failovers.Load() < 5 {
		t.Fatalf("%d failovers from a target that drops every connection", c.failovers.Load())
	}
}

func TestClientDoesNotFailOverOnAnAnswer(t *testing.T) {
	a, b := newFakeServer(t, 1), newFakeServer(t, 1)
	a.fault = func(fakeRequest) fault { return faultStatus503 }
	b.fault = a.fault
	c := newTargetsClient(t, a.url, b.url)
	for range 20 {
		if res := c.do(context.Background(), testRequest(), nil); res.errKind != "status_503" {
			t.Fatalf("error kind %q, want the target's own 503", res.errKind)
		}
	}
	if got := len(a.requests()) + len(b.requests()); got != 20 || c.failovers.Load() != 0 {
		t.Fatalf("servers saw %d requests for 20 and %d failovers: a 503 was passed on", got, c.failovers.Load())
	}
}

func TestEveryTargetDownIsATransportError(t *testing.T) {
	c := newTargetsClient(t, closedURL(t), closedURL(t))
	res := c.do(context.Background(), testRequest(), nil)
	if res.errKind != kindTransport || c.failovers.Load() != 1 {
		t.Fatalf("error kind %q after %d failovers, want transport after 1", res.errKind, c.failovers.Load())
	}
}

func TestChatRequestsCarryMessagesAndReadUsage(t *testing.T) {
	server := newFakeServer(t, 1)
	c, err := newClient(clientConfig{targets: []string{server.url}, endpoint: endpointChat, systemBytes: 12, timeout: time.Minute}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	req := testRequest()
	for range 2 {
		res := c.do(context.Background(), req, http.Header{sessionHeader: {"s"}})
		if !res.ok() || res.events != 6 || res.usage == nil || res.usage.promptTokens != 10 {
			t.Fatalf("chat request: ok %v events %d usage %+v (%s %v)", res.ok(), res.events, res.usage, res.errKind, res.err)
		}
		if got := server.requests()[0]; !got.chat || strings.Join(got.roles, ",") != "system,user" ||
			got.system != string(req.Prompt[:12]) || got.prompt != string(req.Prompt) || !got.usage {
			t.Fatalf("server saw %+v, want a streamed chat request with the first 12 bytes as the system message", got)
		}
	}
	if res := c.do(context.Background(), req, nil); res.usage.cachedTokens != 8 {
		t.Fatalf("cached tokens %d on a repeated prompt, want the fake's 8", res.usage.cachedTokens)
	}
}

func TestChatBodyWithoutASystemPartIsOneUserMessage(t *testing.T) {
	var body struct {
		Messages []chatMessage `json:"messages"`
		Model    string        `json:"model"`
	}
	req := testRequest()
	req.Prompt = []byte("<tag> & \"quoted\" \xff")
	if err := json.Unmarshal(chatBody(req, 0), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 1 || body.Messages[0].Role != "user" || body.Messages[0].Content != "<tag> & \"quoted\" \uFFFD" || body.Model != "m" {
		t.Fatalf("body %+v", body)
	}
	if !strings.Contains(string(chatBody(req, 0)), "<tag> &") {
		t.Fatalf("the prompt was HTML-escaped: %s", chatBody(req, 0))
	}
}

func TestAgenticChatRunOverTwoTargetsReportsBoth(t *testing.T) {
	a, b := newFakeServer(t, 1), newFakeServer(t, 1)
	out := filepath.Join(t.TempDir(), "report.json")
	table := runAgenticChat(t, a, b, 8, 4, "--json", out)
	var rep report
	data, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(data, &rep)
	}
	if err != nil || rep.Succeeded != 32 || len(rep.PerTarget) != 2 {
		t.Fatalf("report %+v, %v; table:\n%s", rep, err, table)
	}
	if rep.PerTarget[a.url+chatPath] != len(a.requests()) || rep.PerTarget[b.url+chatPath] != len(b.requests()) {
		t.Fatalf("per target %v, servers saw %d and %d", rep.PerTarget, len(a.requests()), len(b.requests()))
	}
	for _, r := range append(a.requests(), b.requests()...) {
		if !r.chat || len(r.system) != 16*4 {
			t.Fatalf("request %+v: want chat with the 16-token system prompt as its system message", r)
		}
	}
	if cached := a.cachedSum() + b.cachedSum(); rep.CachedTokens != cached || cached == 0 {
		t.Fatalf("report says %d cached tokens, servers %d", rep.CachedTokens, cached)
	}
	if !strings.Contains(table, "per target") || !strings.Contains(table, "failovers") {
		t.Fatalf("table lacks the per-target rows:\n%s", table)
	}
}

func TestRequestsJSONHasOneLinePerRequestWithItsWorkerIDAndTokens(t *testing.T) {
	a, b := newFakeServer(t, 1), newFakeServer(t, 1)
	out := filepath.Join(t.TempDir(), "requests.jsonl")
	runAgenticChat(t, a, b, 4, 3, "--requests-json", out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	turns := map[int]map[int]bool{} // session -> turns seen
	ids := map[string]bool{}
	var cached int64
	for _, text := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l requestLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("line %q: %v", text, err)
		}
		if l.Status != 200 || l.Error != "" || l.Worker == unknownWorker || l.PromptTokens == 0 || l.TTFTMS <= 0 || l.LatencyMS < l.TTFTMS {
			t.Fatalf("line %+v: want a success with its worker, tokens and timings", l)
		}
		if l.RequestID == "" || ids[l.RequestID] {
			t.Fatalf("line %+v: want the response's own x-request-id", l)
		}
		ids[l.RequestID] = true
		if turns[l.Session] == nil {
			turns[l.Session] = map[int]bool{}
		}
		turns[l.Session][l.Turn] = true
		cached += int64(l.CachedTokens)
	}
	if len(turns) != 4 {
		t.Fatalf("sessions %v, want 4 with 3 turns each", turns)
	}
	for s, seen := range turns {
		if len(seen) != 3 {
			t.Fatalf("session %d has turns %v, want 0-2", s, seen)
		}
	}
	if served := a.cachedSum() + b.cachedSum(); cached != served || cached == 0 {
		t.Fatalf("lines say %d cached tokens, servers %d", cached, served)
	}
}

func (f *fakeServer) cachedSum() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cached
}

func TestSessionBalanceSendsEveryTurnOfASessionThroughOneTarget(t *testing.T) {
	servers := []*fakeServer{newFakeServer(t, 1), newFakeServer(t, 1), newFakeServer(t, 1)}
	args := []string{"agentic", "--balance", "session", "--endpoint", "chat", "--sessions", "24", "--turns", "5",
		"--system-prompt-tokens", "16", "--task-tokens", "8", "--observation-tokens", "8", "--answer-tokens", "2", "--think-time", "0s"}
	for _, s := range servers {
		args = append(args, "--target", s.url)
	}
	if table, err := runApp(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, table)
	}
	home := map[string]int{} // session -> the server that took its first turn seen
	perServer := make([]int, len(servers))
	for i, s := range servers {
		for _, r := range s.requests() {
			if r.session == "" {
				t.Fatalf("server %d saw a turn without X-Session-ID", i)
			}
			if h, ok := home[r.session]; ok && h != i {
				t.Fatalf("session %s went to servers %d and %d: not sticky", r.session, h, i)
			}
			home[r.session] = i
			perServer[i]++
		}
	}
	if len(home) != 24 || perServer[0]+perServer[1]+perServer[2] != 24*5 {
		t.Fatalf("saw %d sessions and %v turns per server, want 24 sessions of 5 turns", len(home), perServer)
	}
	for i, n := range perServer {
		if n == 0 {
			t.Fatalf("server %d took no session: sessions are not spread over the targets (%v)", i, perServer)
		}
	}
}

func TestBalanceRefusesAnUnknownMode(t *testing.T) {
	_, err := runApp(t, "agentic", "--balance", "sticky", "--target", "http://127.0.0.1:1")
	if !errors.Is(err, errBadFlag) || !strings.Contains(err.Error(), "--balance") {
		t.Fatalf("err %v, want a bad --balance", err)
	}
}

// runAgenticChat runs sessions x turns agentic chat turns with a 16-token
// system prompt over the two servers, with the extra flags, and returns the
// table; a failed run fails the test.
func runAgenticChat(t *testing.T, a, b *fakeServer, sessions, turns int, extra ...string) string {
	t.Helper()
	args := append([]string{"agentic", "--target", a.url, "--target", b.url, "--endpoint", "chat",
		"--sessions", strconv.Itoa(sessions), "--turns", strconv.Itoa(turns), "--system-prompt-tokens", "16",
		"--task-tokens", "8", "--observation-tokens", "8", "--answer-tokens", "2", "--think-time", "0s"}, extra...)
	table, err := runApp(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, table)
	}
	return table
}
