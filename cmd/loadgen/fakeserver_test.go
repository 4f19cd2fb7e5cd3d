package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// fault is how the fake server misbehaves on one request.
type fault int

const (
	faultNone        fault = iota
	faultStatus503         // answer 503 before any byte of stream
	faultCut               // stream two chunks, then end without [DONE]
	faultStreamError       // an error object in the stream
	faultNoUsage           // a complete stream without the usage chunk
)

// fakeRequest is what the fake server received.
type fakeRequest struct {
	n         int    // arrival order, from 0
	prompt    string //
	maxTokens int
	session   string // X-Session-ID
	model     string
	auth      string
	stream    bool
	usage     bool // stream_options.include_usage
	// chat: the request came to /v1/chat/completions; roles are its messages' roles, and
	// prompt is their contents concatenated.
	chat  bool
	roles []string
	// system is the content of a leading system message.
	system string
}

// fakeServer is a loopback stand-in for an OpenAI-compatible server with several workers behind
// it: it streams SSE completions, names the worker in x-worker-id, and reports cached tokens from
// a per-worker memory of prompts. It keeps its own books of what it answered so tests can check
// the generator's report against them. Safe for concurrent use.
type fakeServer struct {
	url     string
	workers int
	// fault decides the misbehaviour of a request; nil for none.
	fault func(fakeRequest) fault
	// hold, when set, keeps every request from the holdFrom-th on (counting from 0) waiting
	// before it answers, until it is closed.
	hold     chan struct{}
	holdFrom int
	// tokenCap caps the streamed tokens, keeping tests quick.
	tokenCap int

	server *fasthttp.Server
	done   chan struct{}

	mu          sync.Mutex
	received    []fakeRequest
	inflight    int
	maxInflight int
	perWorker   map[string]int // responses by worker
	completed   int            // streams that reached [DONE]
	prompt      int64          // usage sums of the streams that reached [DONE] with usage
	cached      int64
	prefixes    map[string]map[uint64]bool // worker -> hashes of the prompt prefixes it has seen
}

// newFakeServer starts a fake on 127.0.0.1 with the given number of workers; the test's cleanup
// stops it.
func newFakeServer(t testing.TB, workers int) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{
		url: "http://" + ln.Addr().String(), workers: workers, tokenCap: 8,
		perWorker: map[string]int{}, prefixes: map[string]map[uint64]bool{}, done: make(chan struct{}),
	}
	// A short idle-worker period lets the pool's cleaner goroutine notice the shutdown quickly.
	f.server = &fasthttp.Server{Handler: f.handle, MaxRequestBodySize: 64 << 20, MaxIdleWorkerDuration: 20 * time.Millisecond}
	go func() {
		defer close(f.done)
		_ = f.server.Serve(ln)
	}()
	t.Cleanup(f.stop)
	return f
}

// stop shuts the server down and waits for it.
func (f *fakeServer) stop() {
	f.mu.Lock()
	if f.hold != nil {
		select {
		case <-f.hold:
		default:
			close(f.hold)
		}
	}
	f.mu.Unlock()
	_ = f.server.Shutdown()
	<-f.done
}

func (f *fakeServer) handle(ctx *fasthttp.RequestCtx) {
	req, err := parseFakeRequest(ctx)
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusBadRequest)
		return
	}
	f.mu.Lock()
	req.n = len(f.received)
	f.received = append(f.received, req)
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	hold := f.hold
	if req.n < f.holdFrom {
		hold = nil
	}
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	kind := faultNone
	if f.fault != nil {
		kind = f.fault(req)
	}
	worker := f.pickWorker(req)
	ctx.Response.Header.Set("x-worker-id", worker)
	ctx.Response.Header.Set("x-request-id", fmt.Sprintf("%s-%d", f.url, req.n)) // as a router names its log line
	if kind == faultStatus503 {
		f.finish(worker, nil)
		ctx.Error(`{"error":{"message":"overloaded"}}`, fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.Set("x-worker-id", worker) // Error resets the headers
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) { f.stream(w, req, worker, kind) })
}

func parseFakeRequest(ctx *fasthttp.RequestCtx) (fakeRequest, error) {
	var body struct {
		Model    string `json:"model"`
		Prompt   string `json:"prompt"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens     int  `json:"max_tokens"`
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	path := string(ctx.Path())
	if path != "/v1/completions" && path != "/v1/chat/completions" || !ctx.IsPost() {
		return fakeRequest{}, fmt.Errorf("unexpected %s %s", ctx.Method(), ctx.Path())
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
		return fakeRequest{}, err
	}
	req := fakeRequest{
		prompt: body.Prompt, maxTokens: body.MaxTokens, model: body.Model, stream: body.Stream,
		usage: body.StreamOptions.IncludeUsage, session: string(ctx.Request.Header.Peek("X-Session-ID")),
		auth: string(ctx.Request.Header.Peek("Authorization")), chat: path == "/v1/chat/completions",
	}
	if req.chat != (body.Messages != nil) || req.chat && body.Prompt != "" {
		return fakeRequest{}, fmt.Errorf("%s with messages %v and prompt %q", path, body.Messages != nil, body.Prompt)
	}
	for i, m := range body.Messages {
		req.roles = append(req.roles, m.Role)
		req.prompt += m.Content
		if i == 0 && m.Role == "system" {
			req.system = m.Content
		}
	}
	return req, nil
}

// pickWorker sends a session to a fixed worker, other requests round robin.
func (f *fakeServer) pickWorker(req fakeRequest) string {
	n := req.n
	if req.session != "" {
		h := fnv.New32a()
		h.Write([]byte(req.session))
		n = int(h.Sum32())
	}
	return "w" + strconv.Itoa(n%f.workers)
}

// stream writes the SSE answer of req.
func (f *fakeServer) stream(w *bufio.Writer, req fakeRequest, worker string, kind fault) {
	tokens := min(req.maxTokens, f.tokenCap)
	for i := range tokens {
		if kind == faultCut && i == 2 {
			f.finish(worker, nil)
			return
		}
		if req.chat {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", req.n, i)
		} else {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-%d\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"t%d \",\"finish_reason\":null}],\"usage\":null}\n\n", req.n, i)
		}
		_ = w.Flush()
	}
	if kind == faultStreamError {
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine died\",\"type\":\"server_error\"}}\n\n")
		f.finish(worker, nil)
		return
	}
	use := &usage{promptTokens: len(req.prompt) / workload.TokenBytes, completionTokens: tokens}
	use.cachedTokens = f.cachedTokens(worker, req.prompt)
	if kind != faultNoUsage {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n",
			use.promptTokens, use.completionTokens, use.promptTokens+use.completionTokens, use.cachedTokens)
	} else {
		use = nil
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.finish(worker, use)
}

// fakeBlockBytes is the granularity of the fake's prefix cache: four tokens.
const fakeBlockBytes = 4 * workload.TokenBytes

// cachedTokens is the longest prefix, in whole blocks, that req shares with a prompt the worker
// saw, in tokens; it then remembers the prompt's prefixes. Hashing prefixes keeps the cost linear
// in the prompt, so the fake does not slow down as it serves more.
func (f *fakeServer) cachedTokens(worker, prompt string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := f.prefixes[worker]
	if seen == nil {
		seen = map[uint64]bool{}
		f.prefixes[worker] = seen
	}
	h := fnv.New64a()
	cached, hit := 0, true
	for end := fakeBlockBytes; end <= len(prompt); end += fakeBlockBytes {
		h.Write([]byte(prompt[end-fakeBlockBytes : end]))
		key := h.Sum64()
		if hit = hit && seen[key]; hit {
			cached = end
		}
		seen[key] = true
	}
	return cached / workload.TokenBytes
}

// finish books a response; use is nil unless the stream completed with usage.
func (f *fakeServer) finish(worker string, use *usage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight--
	f.perWorker[worker]++
	if use != nil {
		f.completed++
		f.prompt += int64(use.promptTokens)
		f.cached += int64(use.cachedTokens)
	}
}

// setHold makes requests wait for release, from the from-th on.
func (f *fakeServer) setHold(from int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.holdFrom = make(chan struct{}), from
}

// release lets held requests answer.
func (f *fakeServer) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.hold)
	f.hold = nil
}

// requests returns a copy of what the server received.
func (f *fakeServer) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.received...)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, cond, "%s", what)
}
