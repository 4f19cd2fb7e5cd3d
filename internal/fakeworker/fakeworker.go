// Package fakeworker is a loopback stand-in for an inference engine that a
// test can make misbehave the way buggy, overloaded and dying engines do:
// bytes past its own Content-Length, a stream cut without its terminating
// chunk, an endless body, a 429 with Retry-After, slow or missing headers.
// It speaks HTTP/1.1 on raw sockets (requests are parsed with net/http,
// answers written byte by byte), so every such fault is really on the wire.
//
// One Worker serves keep-alive connections, any number of them at once. By
// default it answers inference like a small vLLM: a JSON completion, an SSE
// stream for "stream":true, and a prefill answer with kv_transfer_params for
// a request that asks for remote decode.
package fakeworker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Worker is one fake engine on a loopback port.
type Worker struct {
	Name string
	URL  string // http://127.0.0.1:port
	Addr string // 127.0.0.1:port

	// Inference counts POST requests read; Requests counts every request.
	Inference atomic.Int64
	Requests  atomic.Int64
	// Conns counts connections accepted.
	Conns atomic.Int64
	// HungUp counts answers the peer abandoned: it closed the connection
	// while the worker was still holding or writing the answer.
	HungUp atomic.Int64

	behaviour atomic.Pointer[Behaviour]
	every     atomic.Pointer[Behaviour] // when set, answers every request, not only POSTs
	models    atomic.Pointer[string]
	metrics   atomic.Pointer[Behaviour]
	lastBody  atomic.Pointer[string]
	lastReq   atomic.Pointer[http.Request]

	pathsMu sync.Mutex
	paths   []string

	gateMu sync.Mutex
	gate   chan struct{}

	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	quit  chan struct{}
}

// Behaviour answers one request. It may write anything to the exchange's
// connection, and may close it.
type Behaviour func(e *Exchange)

// Start runs a worker until the test ends.
func Start(t testing.TB, name string) *Worker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{Name: name, Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String(), ln: ln,
		conns: map[net.Conn]struct{}{}, quit: make(chan struct{}), gate: make(chan struct{})}
	w.Set(Default())
	w.wg.Add(1)
	go w.accept()
	t.Cleanup(w.Close)
	return w
}

// Set makes b the answer to every inference request from now on.
func (w *Worker) Set(b Behaviour) { w.behaviour.Store(&b) }

// SetEvery makes b answer every request, whatever its method and path (a
// store of objects an engine keeps: GET and DELETE of stored responses).
func (w *Worker) SetEvery(b Behaviour) { w.every.Store(&b) }

// SetModels makes GET /v1/models list model (empty: answer 404, as an
// engine that declares no model).
func (w *Worker) SetModels(model string) {
	body := ""
	if model != "" {
		body = fmt.Sprintf(`{"object":"list","data":[{"id":%q,"object":"model"}]}`, model)
	}
	w.models.Store(&body)
}

// SetAdapters makes GET /v1/models list base and its LoRA adapters, as
// vLLM lists them: each adapter names base as its parent.
func (w *Worker) SetAdapters(base string, adapters ...string) {
	data := []string{fmt.Sprintf(`{"id":%q,"object":"model","root":%[1]q,"parent":null}`, base)}
	for _, a := range adapters {
		data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","root":"/adapters/%[1]s","parent":%q}`, a, base))
	}
	body := `{"object":"list","data":[` + strings.Join(data, ",") + `]}`
	w.models.Store(&body)
}

// SetMetrics makes b the answer to GET /metrics (nil: 404).
func (w *Worker) SetMetrics(b Behaviour) {
	if b == nil {
		w.metrics.Store(nil)
		return
	}
	w.metrics.Store(&b)
}

// LastBody is the body of the latest inference request.
func (w *Worker) LastBody() string {
	if b := w.lastBody.Load(); b != nil {
		return *b
	}
	return ""
}

// LastHeader is the header of the latest inference request.
func (w *Worker) LastHeader() http.Header {
	if r := w.lastReq.Load(); r != nil {
		return r.Header
	}
	return nil
}

// LastPath is the request URI of the latest inference request.
func (w *Worker) LastPath() string {
	if r := w.lastReq.Load(); r != nil {
		return r.RequestURI
	}
	return ""
}

// Paths lists "METHOD URI" of every request so far, in order.
func (w *Worker) Paths() []string {
	w.pathsMu.Lock()
	defer w.pathsMu.Unlock()
	return append([]string(nil), w.paths...)
}

// Open releases every answer held by Gate, now and from now on, until
// Shut.
func (w *Worker) Open() {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	select {
	case <-w.gate:
	default:
		close(w.gate)
	}
}

// Shut makes Gate hold answers again.
func (w *Worker) Shut() {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	select {
	case <-w.gate:
		w.gate = make(chan struct{})
	default:
	}
}

func (w *Worker) gateCh() chan struct{} {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	return w.gate
}

// Close stops the worker, closes its connections and waits for them.
func (w *Worker) Close() {
	select {
	case <-w.quit:
		return
	default:
		close(w.quit)
	}
	w.Open()
	w.ln.Close()
	w.mu.Lock()
	for c := range w.conns {
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *Worker) accept() {
	defer w.wg.Done()
	for {
		c, err := w.ln.Accept()
		if err != nil {
			return
		}
		w.Conns.Add(1)
		w.mu.Lock()
		w.conns[c] = struct{}{}
		w.mu.Unlock()
		w.wg.Add(1)
		go w.serve(c)
	}
}

func (w *Worker) serve(c net.Conn) {
	defer w.wg.Done()
	defer func() {
		c.Close()
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		e := &Exchange{Worker: w, Req: req, Body: body, conn: c, br: br, bw: bufio.NewWriter(c)}
		w.Requests.Add(1)
		w.pathsMu.Lock()
		w.paths = append(w.paths, req.Method+" "+req.RequestURI)
		w.pathsMu.Unlock()
		w.dispatch(e)
		if e.closed || e.bw.Flush() != nil {
			return
		}
	}
}

func (w *Worker) dispatch(e *Exchange) {
	switch every := w.every.Load(); {
	case every != nil:
		if e.Req.Method == http.MethodPost {
			w.Inference.Add(1)
		}
		(*every)(e)
	case e.Req.Method == http.MethodPost:
		s := string(e.Body)
		w.lastBody.Store(&s)
		w.lastReq.Store(e.Req)
		w.Inference.Add(1) // after the stores: a test that saw the count reads this request
		(*w.behaviour.Load())(e)
	case strings.HasSuffix(e.Req.URL.Path, "/v1/models") && w.models.Load() != nil && *w.models.Load() != "":
		e.JSON(200, *w.models.Load())
	case strings.HasSuffix(e.Req.URL.Path, "/metrics") && w.metrics.Load() != nil:
		(*w.metrics.Load())(e)
	case strings.HasSuffix(e.Req.URL.Path, "/health"):
		e.JSON(200, `{}`)
	default:
		e.JSON(404, `{"error":{"message":"not found"}}`)
	}
}

// Exchange is one request and the connection its answer goes on.
type Exchange struct {
	Worker *Worker
	Req    *http.Request
	Body   []byte
	conn   net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	closed bool
}

// Wants reports whether the request body contains s.
func (e *Exchange) Wants(s string) bool { return bytes.Contains(e.Body, []byte(s)) }

// Raw writes b to the connection as it is, and flushes.
func (e *Exchange) Raw(b string) error {
	if _, err := e.bw.WriteString(b); err != nil {
		return err
	}
	return e.bw.Flush()
}

// Head writes a status line and headers (x-worker-id among them), then the
// given header lines ("Name: value").
func (e *Exchange) Head(status int, lines ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nx-worker-id: %s\r\n", status, http.StatusText(status), e.Worker.Name)
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return e.Raw(b.String())
}

// JSON answers with status and a JSON body, framed by Content-Length.
func (e *Exchange) JSON(status int, body string, lines ...string) {
	lines = append([]string{"Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body))}, lines...)
	if e.Head(status, lines...) == nil {
		_ = e.Raw(body)
	}
}

// StartStream writes the head of a chunked SSE answer.
func (e *Exchange) StartStream() error {
	return e.Head(200, "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
}

// Event writes one SSE event "data: <data>\n\n" as one chunk.
func (e *Exchange) Event(data string) error {
	ev := "data: " + data + "\n\n"
	return e.Raw(fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
}

// EndStream writes data: [DONE] and the terminating chunk.
func (e *Exchange) EndStream() error {
	if err := e.Event("[DONE]"); err != nil {
		return err
	}
	return e.Raw("0\r\n\r\n")
}

// Cut closes the connection at once, mid-answer.
func (e *Exchange) Cut() {
	_ = e.bw.Flush()
	e.closed = true
	e.conn.Close()
}

// WaitHangUp blocks until the peer closes the connection (true), counting it
// in HungUp, or until the gate opens or the worker stops (false).
func (e *Exchange) WaitHangUp() bool {
	hung := make(chan bool, 1)
	go func() {
		_, err := e.br.Peek(1)
		hung <- err != nil
	}()
	select {
	case h := <-hung:
		if h {
			e.Worker.HungUp.Add(1)
			e.closed = true
		}
		return h
	case <-e.Worker.gateCh():
	case <-e.Worker.quit:
	}
	_ = e.conn.SetReadDeadline(time.Unix(1, 0))
	<-hung
	_ = e.conn.SetReadDeadline(time.Time{})
	return false
}

// Default answers like a small vLLM: a prefill answer with
// kv_transfer_params to a request that asks for remote decode, an SSE
// stream of three events and [DONE] to "stream":true, a JSON completion
// otherwise.
func Default() Behaviour {
	return func(e *Exchange) {
		switch {
		case e.Wants(`"do_remote_decode":true`):
			e.JSON(200, fmt.Sprintf(`{"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,`+
				`"do_remote_decode":false,"remote_engine_id":%q,"remote_block_ids":[1,2],"remote_host":"127.0.0.1","remote_port":5600}}`, e.Worker.Name))
		case e.Wants(`"stream":true`):
			Stream(3)(e)
		default:
			e.JSON(200, Completion(e.Worker.Name))
		}
	}
}

// Completion is the JSON body of a completion from worker name.
func Completion(name string) string {
	return fmt.Sprintf(`{"worker":%q,"choices":[{"text":"ok"}],"usage":{"prompt_tokens":4,"completion_tokens":1}}`, name)
}

// Stream answers with n SSE events and [DONE].
func Stream(n int) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() == nil && e.events(0, n) {
			_ = e.EndStream()
		}
	}
}

// StreamThenCut sends n SSE events, then closes the connection without the
// terminating chunk: an engine that died mid-stream.
func StreamThenCut(n int) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() == nil && e.events(0, n) {
			e.Cut()
		}
	}
}

// events writes the SSE events numbered from to n-1; false when a write
// failed.
func (e *Exchange) events(from, n int) bool {
	for i := from; i < n; i++ {
		if e.Event(fmt.Sprintf(`{"n":%d}`, i)) != nil {
			return false
		}
	}
	return true
}

// StreamHeld sends one SSE event, then holds the rest until the gate opens
// (the rest follows, with [DONE]) or the peer hangs up.
func StreamHeld(n int) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() != nil || e.Event(`{"n":0}`) != nil {
			return
		}
		if !e.WaitHangUp() && e.events(1, n) {
			_ = e.EndStream()
		}
	}
}

// Hold answers nothing until the gate opens (then it answers as Default)
// or the peer hangs up: a wedged engine, or a long generation.
func Hold() Behaviour {
	return func(e *Exchange) {
		if !e.WaitHangUp() {
			Default()(e)
		}
	}
}

// Status answers with status, a JSON body and the given header lines.
func Status(status int, body string, lines ...string) Behaviour {
	return func(e *Exchange) { e.JSON(status, body, lines...) }
}

// ExtraBytes answers a completion and then writes stray bytes past its own
// Content-Length on the same connection.
func ExtraBytes(stray string) Behaviour {
	return func(e *Exchange) {
		body := Completion(e.Worker.Name)
		_ = e.Head(200, "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)))
		_ = e.Raw(body + stray)
	}
}

// ShortBody declares a Content-Length and closes the connection halfway.
func ShortBody() Behaviour {
	return func(e *Exchange) {
		body := Completion(e.Worker.Name)
		_ = e.Head(200, "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)))
		_ = e.Raw(body[:len(body)/2])
		e.Cut()
	}
}

// Endless answers 200 and writes a chunked body that never ends, until the
// peer hangs up.
func Endless() Behaviour {
	return func(e *Exchange) {
		if e.Head(200, "Content-Type: application/json", "Transfer-Encoding: chunked") != nil {
			return
		}
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("x", 64<<10))
		for e.Raw(chunk) == nil {
		}
		e.Worker.HungUp.Add(1)
		e.closed = true
	}
}

// SlowHeaders waits d before answering as Default; a peer that hangs up
// meanwhile is counted in HungUp.
func SlowHeaders(d time.Duration) Behaviour {
	return func(e *Exchange) {
		hung := make(chan bool, 1)
		go func() {
			_, err := e.br.Peek(1)
			hung <- err != nil
		}()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case h := <-hung:
			if h {
				e.Worker.HungUp.Add(1)
				e.closed = true
				return
			}
		case <-t.C:
			_ = e.conn.SetReadDeadline(time.Unix(1, 0))
			<-hung
			_ = e.conn.SetReadDeadline(time.Time{})
		}
		Default()(e)
	}
}

// Text answers 200 with a plain-text body (a /metrics page, say).
func Text(body string) Behaviour {
	return func(e *Exchange) {
		_ = e.Head(200, "Content-Type: text/plain", fmt.Sprintf("Content-Length: %d", len(body)))
		_ = e.Raw(body)
	}
}

// Sequence answers the i-th inference request (from 0) with bs[i], and
// every one after the last with the last.
func Sequence(bs ...Behaviour) Behaviour {
	var n atomic.Int64
	return func(e *Exchange) {
		i := int(n.Add(1) - 1)
		bs[min(i, len(bs)-1)](e)
	}
}

// StreamForever streams SSE events of 32 KiB as fast as the peer takes
// them, until it hangs up (counted in HungUp).
func StreamForever() Behaviour {
	return func(e *Exchange) {
		if e.StartStream() != nil {
			return
		}
		data := `{"text":"` + strings.Repeat("y", 32<<10) + `"}`
		for e.Event(data) == nil {
		}
		e.Worker.HungUp.Add(1)
		e.closed = true
	}
}

// StreamPaced sends n SSE events, one every gap (an engine generating
// tokens at its own pace), then [DONE].
func StreamPaced(n int, gap time.Duration) Behaviour {
	return func(e *Exchange) {
		if e.StartStream() != nil {
			return
		}
		t := time.NewTicker(gap)
		defer t.Stop()
		for i := range n {
			if e.Event(fmt.Sprintf(`{"n":%d}`, i)) != nil {
				return
			}
			<-t.C
		}
		_ = e.EndStream()
	}
}
