package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// errRequestTimeout is the cancellation cause of a request that ran past --request-timeout.
var errRequestTimeout = errors.New("request timeout")

// errBadTarget reports a --target that is not an http(s) URL.
var errBadTarget = errors.New("want an http:// or https:// URL with a host")

// The APIs a request can go to (--endpoint), and the path appended to a target for each.
const (
	endpointCompletions = "completions"
	endpointChat        = "chat"
	endpointMessages    = "messages" // Anthropic's Messages API
	completionsPath     = "/v1/completions"
	chatPath            = "/v1/chat/completions"
	messagesPath        = "/v1/messages"
)

// endpointPaths are the paths of the APIs.
var endpointPaths = map[string]string{endpointCompletions: completionsPath, endpointChat: chatPath, endpointMessages: messagesPath}

// readBufferSize is the buffer a stream is read through: large enough for any ordinary chunk.
const readBufferSize = 32 << 10

// readers pools the stream read buffers, so that a request allocates none.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// client streams completion requests to its targets, each request to a random one (or, with
// sticky set, every request of one session to the same one); a request whose target refuses or
// drops the connection before answering goes to another target, as a load balancer in front of
// them would (see failsOver).
//
// It is built on net/http rather than fasthttp's client: cancelling a request that is blocked in
// a read (Ctrl-C, --duration, --request-timeout) must close its connection at once, which
// net/http does through the request's context and fasthttp's client cannot do for a streamed
// body. Throughput is not lost by this: the transport keeps one idle keep-alive connection per
// concurrent request, bodies are read through pooled buffers, and only the chunks that carry
// usage are parsed; BenchmarkClientStream measures the cost per request.
//
// A client is safe for concurrent use; close releases its idle connections.
type client struct {
	urls []string // one endpoint URL per target
	// api is the API of the bodies sent: endpointCompletions (a prompt), endpointChat (messages)
	// or endpointMessages (Anthropic's).
	api string
	// systemBytes, in chat and messages, is how many leading bytes of a prompt go in a system
	// message (the agentic sessions' shared system prompt); the rest is one user message.
	systemBytes int
	// tools, when any, are those of a tool-calling agent: an agentic turn goes as the agent's
	// conversation, each earlier turn a tool call and its result (agent.go).
	tools     []agentTool
	apiKey    string // sent as a bearer token when set
	clock     Clock
	timeout   time.Duration // per request, from sending to the end of the stream
	transport *http.Transport
	http      *http.Client
	// sticky sends every request carrying the same X-Session-ID to the same target, as a
	// session-sticky load balancer would; requests without one still go to a random target.
	sticky bool
	// failovers counts attempts that went to another target after a connection error.
	failovers atomic.Int64
}

// clientConfig is what a client is built from.
type clientConfig struct {
	targets     []string // server URLs; the endpoint's path is appended unless a URL ends with it
	endpoint    string   // endpointCompletions (default), endpointChat or endpointMessages
	systemBytes int
	tools       int // the agent's tools; 0: none
	apiKey      string
	timeout     time.Duration
	balance     string // balanceRandom (default) or balanceSession
}

// Load balancing over the targets (--balance).
const (
	balanceRandom  = "random"
	balanceSession = "session"
)

// newClient returns a client for cfg's targets.
func newClient(cfg clientConfig, clock Clock) (*client, error) {
	urls, err := endpointURLs(cfg.targets, cfg.endpoint)
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:               nil, // a load generator measures the target, not a proxy on the way
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1 << 16, // keep every connection: reconnecting costs more than idling
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // event streams must arrive as they are produced
		// Prompts run to hundreds of kilobytes: a larger buffer sends one in a few writes.
		WriteBufferSize:     64 << 10,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &client{
		urls: urls, api: cfg.endpoint, systemBytes: cfg.systemBytes, tools: agentTools(cfg.tools), apiKey: cfg.apiKey,
		clock: clock, timeout: cfg.timeout, transport: transport, http: &http.Client{Transport: transport},
		sticky: cfg.balance == balanceSession,
	}, nil
}

// endpointURLs validates every target and returns the endpoint's URL under each.
func endpointURLs(targets []string, endpoint string) ([]string, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w, got none", errBadTarget)
	}
	urls := make([]string, 0, len(targets))
	for _, target := range targets {
		u, err := endpointURL(target, endpoint)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// endpointURL validates target and returns the endpoint's URL under it: /v1/completions,
// /v1/chat/completions or /v1/messages appended, unless the URL already ends with that path.
func endpointURL(target, endpoint string) (string, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w, got %q", errBadTarget, target)
	}
	path, ok := endpointPaths[endpoint]
	if !ok {
		path = completionsPath
	}
	if !strings.HasSuffix(u.Path, path) {
		u.Path = strings.TrimSuffix(u.Path, "/") + path
	}
	return u.String(), nil
}

// completionsURL is endpointURL for /v1/completions.
func completionsURL(target string) (string, error) { return endpointURL(target, endpointCompletions) }

// close releases the idle connections (and so their goroutines).
func (c *client) close() { c.transport.CloseIdleConnections() }

// do sends req as a streamed completion and follows the stream to its end. header adds request
// headers (nil for none). ctx is the run: when it ends, the request is abandoned and reported
// cancelled.
func (c *client) do(ctx context.Context, req workload.Request, header http.Header) result {
	res := result{turn: -1}
	reqCtx, cancel := withClockTimeout(ctx, c.clock, c.timeout, errRequestTimeout)
	defer cancel()
	body := c.body(req)
	start := c.clock.Now()
	resp, err := c.send(reqCtx, body, header, &res)
	if err != nil {
		res.latency = c.clock.Now().Sub(start)
		return c.failed(ctx, reqCtx, res, kindTransport, err)
	}
	defer resp.Body.Close()
	res.status, res.worker, res.requestID = resp.StatusCode, resp.Header.Get("x-worker-id"), resp.Header.Get("x-request-id")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection
		res.latency = c.clock.Now().Sub(start)
		return c.failed(ctx, reqCtx, res, statusKind(resp.StatusCode), fmt.Errorf("status %d", resp.StatusCode))
	}
	kind, err := c.follow(resp.Body, start, &res)
	res.latency = c.clock.Now().Sub(start)
	if err != nil {
		return c.failed(ctx, reqCtx, res, kind, err)
	}
	return res
}

// send posts body to the request's target (firstTarget) and returns its response, trying the
// other targets in turn while the connection fails before any answer (failsOver). res.target is
// set to the index of the target that answered, or that failed last.
func (c *client) send(ctx context.Context, body []byte, header http.Header, res *result) (*http.Response, error) {
	first := c.firstTarget(header)
	for attempt := range len(c.urls) {
		res.target = (first + attempt) % len(c.urls)
		httpReq, err := c.newRequest(ctx, c.urls[res.target], body, header)
		if err != nil {
			return nil, err
		}
		resp, err := c.http.Do(httpReq)
		if err == nil || attempt == len(c.urls)-1 || ctx.Err() != nil || !failsOver(err) {
			return resp, err
		}
		c.failovers.Add(1)
	}
	panic("unreachable: the last attempt returns")
}

// firstTarget is the index of the target a request tries first: a random one, or with sticky
// the one its session hashes to, so that every turn of a session reaches the same replica.
func (c *client) firstTarget(header http.Header) int {
	if len(c.urls) == 1 {
		return 0
	}
	if session := header.Get(sessionHeader); c.sticky && session != "" {
		h := fnv.New64a()
		h.Write([]byte(session))
		return int(h.Sum64() % uint64(len(c.urls)))
	}
	return rand.IntN(len(c.urls))
}

// failsOver reports whether err, from a request that got no response, means the target could
// not have taken the request: the connection was refused or could not be made, or it was reset
// or closed before any answer (a server that died with the connection open). A load balancer
// passes such a request to the next server (nginx's proxy_next_upstream error); timeouts and
// answers, errors included, are the target's own.
func failsOver(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// body renders req for the client's endpoint, streamed with a final usage chunk: an agentic
// turn as a tool-calling agent's conversation when the client has tools.
func (c *client) body(req workload.Request) []byte {
	agent := len(c.tools) > 0 && len(req.Pieces) >= 2
	switch {
	case c.api == endpointMessages && agent:
		return agentMessagesBody(req, c.tools)
	case c.api == endpointMessages:
		return messagesBody(req, c.systemBytes)
	case c.api == endpointChat && agent:
		return agentChatBody(req, c.tools)
	case c.api == endpointChat:
		return chatBody(req, c.systemBytes)
	}
	return req.OpenAIBody(true)
}

// newRequest builds the HTTP request of body to url.
func (c *client) newRequest(ctx context.Context, url string, body []byte, header http.Header) (*http.Request, error) {
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for name, values := range header {
		httpReq.Header[name] = values
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "text/event-stream")
	if c.api == endpointMessages {
		httpReq.Header.Set("anthropic-version", "2023-06-01") // what Anthropic's clients send
	}
	if c.apiKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return httpReq, nil
}

// follow reads the event stream of a 2xx response into res, until [DONE] or the stream's end.
// On failure it returns the error kind.
func (c *client) follow(body io.Reader, start time.Time, res *result) (string, error) {
	in := readers.Get().(*bufio.Reader)
	in.Reset(body)
	defer func() {
		in.Reset(nil)
		readers.Put(in)
	}()
	events := newSSEReader(in)
	stream := completionStream{anthropic: c.api == endpointMessages}
	defer func() {
		res.events = stream.events
		if stream.usage != nil {
			u := *stream.usage // a copy: the stream and its parser are not kept
			res.usage = &u
		}
	}()
	for !stream.done {
		data, err := events.next()
		if err == io.EOF {
			return kindStreamCut, errStreamCut
		}
		if err != nil {
			return kindTransport, err
		}
		if res.ttft == 0 {
			res.ttft = max(c.clock.Now().Sub(start), time.Nanosecond)
		}
		if err := stream.onEvent(data); err != nil {
			return streamErrorKind(err), err
		}
	}
	return "", nil
}

// streamErrorKind classifies an error of completionStream.onEvent.
func streamErrorKind(err error) string {
	if errors.Is(err, errStreamError) {
		return kindStreamError
	}
	return kindBadUsage
}

// failed completes res as a failure: cancelled when the run is over, a timeout when the
// request's own deadline passed, else an error of kind.
func (c *client) failed(run, req context.Context, res result, kind string, err error) result {
	switch {
	case run.Err() != nil:
		res.cancelled = true
	case errors.Is(context.Cause(req), errRequestTimeout):
		res.errKind, res.err = kindTimeout, errRequestTimeout
	default:
		res.errKind, res.err = kind, err
	}
	return res
}
