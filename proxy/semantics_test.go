package proxy

// The failure semantics of the request path, one test per way a worker or a
// client can misbehave: every response a client receives is the answer to
// its own request, complete, or visibly failed.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/proxy/peek"
)

// staleAnswer is a whole HTTP response that a buggy worker writes past the
// end of its real one: a pooled connection that kept it would hand it to
// the next client as its answer.
var staleAnswer = func() string {
	body := `{"worker":"stale","choices":[{"text":"someone else's completion"}]}`
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

func TestStrayBytesPastContentLengthNeverReachTheNextClient(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.ExtraBytes(staleAnswer))
	r := startRouter(t, Config{}, w)
	if _, body := post(t, r.url, "/v1/completions", completion("first", false)); !strings.Contains(body, `"worker":"w1"`) {
		t.Fatalf("first answer %s", body)
	}
	w.Set(fakeworker.Default())
	for i := range 3 {
		if _, body := post(t, r.url, "/v1/completions", completion(fmt.Sprint("next ", i), false)); strings.Contains(body, "stale") {
			t.Fatalf("request %d got the bytes the worker wrote past its previous answer: %s", i, body)
		}
	}
	if r.totalLoad() != 0 {
		t.Fatalf("load %d", r.totalLoad())
	}
}

// TestAnIdleConnectionWithStrayBytesIsNotReused: bytes that arrive on a
// pooled connection after its answer was read are seen before reuse.
func TestAnIdleConnectionWithStrayBytesIsNotReused(t *testing.T) {
	u, c, server := dialedUpstream(t)
	u.release(c, true, time.Now())
	if _, err := server.Write([]byte(staleAnswer)); err != nil {
		t.Fatal(err)
	}
	if peek.Look(c.Conn, true) != peek.Data { // wait until the bytes are there, consuming nothing
		t.Fatal("the stray bytes never arrived")
	}
	if got := u.takeIdle(time.Now()); got != nil {
		t.Fatal("a pooled connection with unread bytes on it was handed out")
	}
}

func TestAWorkerDyingMidStreamEndsTheStreamVisibly(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamThenCut(2))
	r := startRouter(t, Config{}, w)
	resp, body, err := readStream(t, r.url, completion("x", true))
	if err == nil {
		t.Fatalf("the stream read to a clean end: %q", body)
	}
	if resp.StatusCode != 200 || !strings.Contains(body, `data: {"n":1}`) || strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if !strings.Contains(body, `data: {"error":{`) {
		t.Fatalf("no error event before the end: %q", body)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return metric(t, r, `vllm_router_stream_errors_total`) == 1 }, "the request to be counted")
	if n := metric(t, r, `vllm_router_request_errors_total{route="/v1/completions",status="200",error_type="stream_cut"}`); n != 1 {
		t.Fatalf("request errors %v, want the cut stream counted", n)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
}

func TestTheRequestTimeoutMidStreamEndsTheStreamVisibly(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamHeld(3))
	r := startRouter(t, Config{RequestTimeout: 300 * time.Millisecond}, w)
	_, body, err := readStream(t, r.url, completion("x", true))
	if err == nil || !strings.Contains(body, `"code":504`) {
		t.Fatalf("err %v body %q, want a cut stream after a 504 error event", err, body)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker to see its connection closed")
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
	timedOut := `vllm_router_request_errors_total{route="/v1/completions",status="504",error_type="request_timeout"}`
	testwait.Eventually(t, waitDeadline, func() bool { return metric(t, r, timedOut) == 1 }, "the cut counted as the request's timeout")
}

// readStream posts a streaming request and reads the whole body; err is what
// the end of the body looked like to a Go client (nil: a clean end).
func readStream(t *testing.T, url, body string) (*http.Response, string, error) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestEveryAttemptFailedPassesTheLastWorkerAnswerThrough(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		status  int
		lines   []string
	}{
		{"429 with Retry-After from two workers", 2, 429, []string{"Retry-After: 7"}},
		{"a lone 503", 1, 503, nil},
		{"500 from two workers", 2, 500, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws []*fakeworker.Worker
			for i := range tc.workers {
				w := startFake(t, fmt.Sprint("w", i+1))
				w.Set(fakeworker.Status(tc.status, `{"error":{"message":"slow down, from the worker"}}`, tc.lines...))
				ws = append(ws, w)
			}
			r := startRouter(t, Config{Retry: Retry{MaxAttempts: 3}}, ws...)
			resp, body := post(t, r.url, "/v1/completions", completion("x", false))
			if resp.StatusCode != tc.status || body != `{"error":{"message":"slow down, from the worker"}}` {
				t.Fatalf("status %d body %s, want the worker's own %d", resp.StatusCode, body, tc.status)
			}
			if len(tc.lines) > 0 && resp.Header.Get("Retry-After") != "7" {
				t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
			}
			attempts := int64(0)
			for _, w := range ws {
				attempts += w.Inference.Load()
			}
			if attempts != 3 || metric(t, r, "vllm_router_retries_total") != 2 || r.totalLoad() != 0 {
				t.Fatalf("%d attempts, %v retries counted, load %d; want 3, 2, 0", attempts,
					metric(t, r, "vllm_router_retries_total"), r.totalLoad())
			}
		})
	}
}

// TestAKeptAnswerOutlivesALaterConnectError: the worker's 429 is what the
// client gets even when the last attempt found no worker to answer at all.
func TestAKeptAnswerOutlivesALaterConnectError(t *testing.T) {
	limited := startFake(t, "limited")
	limited.Set(fakeworker.Status(429, `{"error":{"message":"rate limited"}}`, "Retry-After: 3"))
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	r := startRouter(t, Config{Retry: Retry{MaxAttempts: 2}})
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: limited.URL, Role: RoleRegular}, {ID: 2, URL: dead, Role: RoleRegular}})
	resp, body := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" || !strings.Contains(body, "rate limited") {
		t.Fatalf("status %d %s, want the 429 the first attempt got", resp.StatusCode, body)
	}
}

func TestAWorkerThatNeverSendsHeadersIsA504(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.SlowHeaders(time.Minute))
	r := startRouter(t, Config{RequestTimeout: 300 * time.Millisecond}, w)
	resp, body := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 504 || !strings.Contains(body, `"error"`) {
		t.Fatalf("status %d %s, want a 504", resp.StatusCode, body)
	}
	if w.Inference.Load() != 1 || metric(t, r, "vllm_router_retries_total") != 0 {
		t.Fatalf("%d attempts, %v retries: nothing may start past the deadline", w.Inference.Load(), metric(t, r, "vllm_router_retries_total"))
	}
}

func TestOneWorkerIsTriedAgainUntilTheAttemptsRunOut(t *testing.T) {
	w := startFake(t, "only")
	fail := fakeworker.Status(503, induced)
	w.Set(fakeworker.Sequence(fail, fail, fakeworker.Default()))
	r := startRouter(t, Config{Retry: Retry{MaxAttempts: 3}}, w)
	resp, body := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 200 || !strings.Contains(body, `"worker":"only"`) {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if w.Inference.Load() != 3 || metric(t, r, "vllm_router_retries_total") != 2 {
		t.Fatalf("%d attempts, %v retries; want 3 and 2", w.Inference.Load(), metric(t, r, "vllm_router_retries_total"))
	}
}

// TestRetriesGoToTheLeastRecentlyFailedWorker: once both workers failed,
// the one that failed first is tried first.
func TestRetriesGoToTheLeastRecentlyFailedWorker(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	for _, w := range []*fakeworker.Worker{a, b} {
		w.Set(fakeworker.Status(503, induced))
	}
	r := startRouter(t, Config{Retry: Retry{MaxAttempts: 5}}, a, b)
	post(t, r.url, "/v1/completions", completion("x", false))
	if a.Inference.Load()+b.Inference.Load() != 5 || max(a.Inference.Load(), b.Inference.Load()) != 3 {
		t.Fatalf("attempts a %d b %d, want 5 alternating", a.Inference.Load(), b.Inference.Load())
	}
}

func TestNoAttemptStartsPastTheDeadlineAndNoBreakerIsCharged(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	a.Set(fakeworker.Status(503, induced))
	health := newRecordingHealth()
	r := startRouterHealth(t, Config{RequestTimeout: 200 * time.Millisecond,
		Retry: Retry{MaxAttempts: 5, InitialBackoff: time.Second}}, health, a, b)
	resp, body := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 503 || body != induced {
		t.Fatalf("status %d %s, want the worker's 503", resp.StatusCode, body)
	}
	if b.Inference.Load() != 0 || metric(t, r, "vllm_router_retries_total") != 0 {
		t.Fatalf("a retry started past the deadline: b saw %d", b.Inference.Load())
	}
	if got := health.outcomes(); len(got) != 1 || got[0] != (outcomeRecord{1, Failed}) {
		t.Fatalf("breaker outcomes %v, want one failure of worker 1", got)
	}
}

func TestARequestOnAStuckWorkerIsRetriedElsewhere(t *testing.T) {
	stuck, good := startFake(t, "stuck"), startFake(t, "good")
	stuck.Set(fakeworker.Hold())
	health := newRecordingHealth()
	r := startRouterHealth(t, Config{}, health, stuck, good)
	done := make(chan string, 1)
	go func() {
		resp, body := post(t, r.url, "/v1/completions", completion("x", false))
		done <- resp.Header.Get("x-worker-id") + " " + body
	}()
	testwait.Eventually(t, waitDeadline, func() bool { return stuck.Inference.Load() == 1 }, "the request on the stuck worker")
	health.judgeStuck(1)
	if got := <-done; !strings.HasPrefix(got, "good ") {
		t.Fatalf("answer %q, want the good worker's", got)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return stuck.HungUp.Load() == 1 }, "the stuck worker's request to be cancelled")
	if r.totalLoad() != 0 {
		t.Fatalf("load %d", r.totalLoad())
	}
}

func TestWorkerBasePathIsKept(t *testing.T) {
	w := startFake(t, "w1")
	w.SetModels("m")
	r := startRouter(t, Config{})
	r.proxy.Fleet().SetWorkers([]Worker{{ID: 1, URL: w.URL + "/w1/", Role: RoleRegular}})
	testwait.Eventually(t, waitDeadline, func() bool {
		_, body := get(t, r.url+"/v1/models")
		return strings.Contains(body, `"m"`)
	}, "the model to be discovered")
	if resp, _ := post(t, r.url, "/v1/completions?echo=1", completion("x", false)); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := w.LastPath(); got != "/w1/v1/completions?echo=1" {
		t.Fatalf("inference went to %q", got)
	}
	for _, p := range w.Paths() {
		if !strings.Contains(p, " /w1/") {
			t.Fatalf("a request left the base path: %q", p)
		}
	}
}

func TestAHalfClosedClientIsAnswered(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Hold())
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", false))
	defer conn.Close()
	conn.(*net.TCPConn).CloseWrite()
	testwait.Eventually(t, waitDeadline, func() bool { return w.Inference.Load() == 1 }, "the request to reach the worker")
	for _, want := range []string{"HTTP/1.1 100 Continue\r\n", "\r\n"} {
		if line, err := br.ReadString('\n'); err != nil || line != want {
			t.Fatalf("%q %v, want an interim response while the worker computes", line, err)
		}
	}
	w.Open()
	resp := readFinal(t, br)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || !strings.Contains(string(body), `"worker":"w1"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if w.HungUp.Load() != 0 || metric(t, r, "vllm_router_client_disconnects_total") != 0 {
		t.Fatal("a half-closed client was taken for gone")
	}
}

func TestAHalfClosedClientGetsItsWholeStream(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.StreamHeld(3))
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	defer conn.Close()
	conn.(*net.TCPConn).CloseWrite()
	resp := readFinal(t, br)
	events := bufio.NewReader(resp.Body)
	for _, want := range []string{"data: {\"n\":0}\n", "\n", ": keepalive\n"} {
		if line, err := events.ReadString('\n'); err != nil || line != want {
			t.Fatalf("%q %v, want %q", line, err, want)
		}
	}
	w.Open()
	rest, err := io.ReadAll(events)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest %q %v", rest, err)
	}
	testwait.Eventually(t, waitDeadline, func() bool { return r.totalLoad() == 0 }, "load back to zero")
}

// readFinal reads the next final response, skipping interim ones.
func readFinal(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode >= 200 {
			return resp
		}
	}
}

func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	r := startRouter(t, Config{}, startFake(t, "w1"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, plain := completion("x", true), completion("y", false)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nx-request-id: first\r\nContent-Length: %d\r\n\r\n%s"+
		"POST /v1/completions HTTP/1.1\r\nHost: r\r\nx-request-id: second\r\nContent-Length: %d\r\n\r\n%s",
		len(stream), stream, len(plain), plain)
	br := bufio.NewReader(conn)
	first := readFinal(t, br)
	body, err := io.ReadAll(first.Body)
	if err != nil || first.Header.Get("x-request-id") != "first" || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("first: id %q body %q err %v", first.Header.Get("x-request-id"), body, err)
	}
	second := readFinal(t, br)
	body, _ = io.ReadAll(second.Body)
	if second.Header.Get("x-request-id") != "second" || !strings.Contains(string(body), `"worker":"w1"`) {
		t.Fatalf("second: id %q body %q", second.Header.Get("x-request-id"), body)
	}
}

// TestARequestPipelinedBehindALiveStreamWaitsForIt: the second request
// arrives while the first one's stream is held open, so the client watch
// sees its bytes on the socket; they are the next request, not a client
// that left, and the stream still ends with [DONE].
func TestARequestPipelinedBehindALiveStreamWaitsForIt(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Sequence(fakeworker.StreamHeld(3), fakeworker.Default()))
	r := startRouter(t, Config{}, w)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, plain := completion("x", true), completion("y", false)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nx-request-id: first\r\nContent-Length: %d\r\n\r\n%s", len(stream), stream)
	br := bufio.NewReader(conn)
	first := readFinal(t, br)
	event := make([]byte, 1)
	if _, err := io.ReadFull(first.Body, event); err != nil {
		t.Fatalf("the stream's first event: %v", err)
	}
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nx-request-id: second\r\nContent-Length: %d\r\n\r\n%s", len(plain), plain)
	// The watch ends once a look has seen the pipelined bytes.
	testwait.Eventually(t, waitDeadline, func() bool {
		r.proxy.path.watcher.mu.Lock()
		defer r.proxy.path.watcher.mu.Unlock()
		return r.proxy.path.watcher.head == nil
	}, "the client watch to see the pipelined request")
	w.Open()
	rest, err := io.ReadAll(first.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("first: body %q err %v", rest, err)
	}
	second := readFinal(t, br)
	body, _ := io.ReadAll(second.Body)
	if second.Header.Get("x-request-id") != "second" || !strings.Contains(string(body), `"worker":"w1"`) {
		t.Fatalf("second: id %q body %q", second.Header.Get("x-request-id"), body)
	}
}

func TestDuplicateKeysAreRefused(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{}, w)
	for _, body := range []string{
		`{"model":"m","prompt":"x","model":"other"}`,
		`{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`,
	} {
		path := "/v1/completions"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		if resp, b := post(t, r.url, path, body); resp.StatusCode != 400 || !strings.Contains(b, "twice") {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	if w.Inference.Load() != 0 {
		t.Fatal("a body with a duplicate key reached the worker")
	}
}

// TestAnOversizedBodyGetsA413TheClientCanRead: a client that sends its
// whole body before reading (as Python's http.client does) reads the 413
// instead of a reset.
func TestAnOversizedBodyGetsA413TheClientCanRead(t *testing.T) {
	w := startFake(t, "w1")
	r := startRouter(t, Config{MaxPayloadSize: 1 << 10}, w)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := completion(strings.Repeat("x", 4<<20), false)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatalf("sending the body: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"error"`) || w.Inference.Load() != 0 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
}

func TestAnOversizedBodyAnnouncedWithExpectIsRefusedBeforeItIsSent(t *testing.T) {
	r := startRouter(t, Config{MaxPayloadSize: 1 << 10}, startFake(t, "w1"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", 1<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("%v %v, want 413 before the body", resp, err)
	}
}

func TestAnEndlessWorkerBodyIsA502(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(fakeworker.Endless())
	r := startRouter(t, Config{MaxResponseSize: 1 << 20}, w)
	resp, body := post(t, r.url, "/v1/completions", completion("x", false))
	if resp.StatusCode != 502 || !strings.Contains(body, "max-response-size") {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if w.Inference.Load() != 1 {
		t.Fatalf("%d attempts: a too large answer is not retried", w.Inference.Load())
	}
	testwait.Eventually(t, waitDeadline, func() bool { return w.HungUp.Load() == 1 }, "the worker's connection to be closed")
	if r.totalLoad() != 0 {
		t.Fatalf("load %d", r.totalLoad())
	}
}

func TestDiscoveryReadsABoundedBody(t *testing.T) {
	w := startFake(t, "w1")
	w.SetMetrics(fakeworker.Endless())
	r := startRouter(t, Config{}, w)
	_, err := r.proxy.calls.get(t.Context(), Worker{ID: 1, URL: w.URL}, "/metrics")
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err %v, want a refusal of the endless body", err)
	}
}

// TestMetricsCountWhatTheClientsSaw: errors, retries and cache outcomes
// agree with a client-side count of the same requests.
func TestMetricsCountWhatTheClientsSaw(t *testing.T) {
	a, b := startFake(t, "a"), startFake(t, "b")
	a.Set(fakeworker.Sequence(fakeworker.Status(503, induced), fakeworker.Default()))
	r := startRouter(t, Config{}, a, b)
	prompt := strings.Repeat("a shared system prompt. ", 20)
	var errs, ok int
	for i := range 6 {
		body := completion(prompt+strconv.Itoa(i), false)
		if i == 5 {
			body = `{"model":"m"}` // no prompt: the client's mistake
		}
		if resp, _ := post(t, r.url, "/v1/completions", body); resp.StatusCode >= 400 {
			errs++
		} else {
			ok++
		}
	}
	if got := metric(t, r, `vllm_router_request_errors_total{route="/v1/completions",status="400",error_type="bad_request"}`); got != float64(errs) {
		t.Fatalf("errors %v, client saw %d", got, errs)
	}
	if hits, misses := metric(t, r, "vllm_router_cache_hits_total"), metric(t, r, "vllm_router_cache_misses_total"); hits+misses != float64(ok) {
		t.Fatalf("hits %v + misses %v, want one outcome per routed request (%d)", hits, misses, ok)
	}
	if got := metric(t, r, "vllm_router_retries_total"); got != 1 {
		t.Fatalf("retries %v, want the one retry after the 503", got)
	}
}

// metric reads one sample of the router's metrics; 0 when absent.
func metric(t *testing.T, r *testRouter, sample string) float64 {
	t.Helper()
	var b strings.Builder
	r.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// recordingHealth is a Health that admits every attempt, records each
// outcome, and can judge a worker stuck, as the health monitor does.
type recordingHealth struct {
	mu    sync.Mutex
	ends  []outcomeRecord
	stuck map[affinity.WorkerID]chan struct{}
}

type outcomeRecord struct {
	w affinity.WorkerID
	o Outcome
}

func newRecordingHealth() *recordingHealth {
	return &recordingHealth{stuck: map[affinity.WorkerID]chan struct{}{}}
}

func (h *recordingHealth) Eligible(affinity.WorkerID) bool { return true }

func (h *recordingHealth) Begin(w affinity.WorkerID) (Attempt, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stuck[w] == nil {
		h.stuck[w] = make(chan struct{})
	}
	return &recordedAttempt{h: h, w: w, stuck: h.stuck[w]}, nil
}

func (h *recordingHealth) judgeStuck(w affinity.WorkerID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.stuck[w])
}

func (h *recordingHealth) outcomes() []outcomeRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]outcomeRecord(nil), h.ends...)
}

type recordedAttempt struct {
	h     *recordingHealth
	w     affinity.WorkerID
	stuck chan struct{}
	once  sync.Once
}

func (a *recordedAttempt) Progress(int) {}

func (a *recordedAttempt) End(o Outcome) {
	a.once.Do(func() {
		a.h.mu.Lock()
		a.h.ends = append(a.h.ends, outcomeRecord{a.w, o})
		a.h.mu.Unlock()
	})
}

func (a *recordedAttempt) Stuck() <-chan struct{} { return a.stuck }
