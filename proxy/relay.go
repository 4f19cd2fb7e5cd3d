package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
	"github.com/kvrouter/kvrouter/proxy/requestlog"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// relay is the body of a streamed response. fasthttp's server goroutine
// reads it and writes each read as one chunk, flushed, so every SSE event
// reaches the client as soon as the worker sent it, and then closes it with
// the error that ended the write, if any.
//
// A worker that fails after the first byte (it dies, resets, stalls, or the
// request times out) must not look like a complete answer. The relay then
// sends an OpenAI-style error event, when the stream stands between two SSE
// events, and fails its Read: fasthttp writes no terminating chunk and
// closes the connection, so clients report a broken stream (curl exits 18,
// the OpenAI SDKs raise) instead of a short answer that ends cleanly.
type relay struct {
	streams  *streaming
	x        *exchange
	a        *attempt
	status   int
	sse      bool
	pending  []byte  // what is left of the first read, made before going live
	buf      *[]byte // pending's buffer, from firstReads
	boundary bool    // the bytes relayed so far end between two SSE events
	tail     [4]byte // the last four bytes relayed
	complete bool    // the worker's body ended where its framing said
	failed   error   // why the worker's stream failed
	outcome  Outcome // the attempt's outcome when failed
	event    []byte  // the error event still to send
	events   sseCount
	usage    streamTail // the last bytes relayed, where the engine's final usage is
	// opened is the usage of the stream's first read: Anthropic's streams
	// say the prompt's in their first event (message_start), and some
	// engines only there.
	opened core.Usage
	l      *leg // the leg the stream answers, judged at its end
	// splice, when the stream may resume on another worker, passes whole
	// events on and keeps their text (splice.go); scratch is its read
	// buffer. whyNot says why a stream without one cannot resume.
	splice  *splice
	scratch *[]byte
	whyNot  error

	// mu guards what a watch probing a half-closed client reads: whether
	// fasthttp may be writing (from a Read that returned bytes, headers
	// first, to the next Read), the boundary, and the end.
	mu      sync.Mutex
	writing bool
	closed  bool
	reads   int
}

// firstReads hold the first read of a stream, made while the attempt can
// still be retried: a worker that fails before its first body byte is
// replaced by another one, with the client none the wiser.
var firstReads = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// streaming is how the proxy relays streams: each write to the client
// bounded, and a stream its worker cut after the first byte resumed on
// another worker when it can (migrate.go). Safe for concurrent use.
type streaming struct {
	writeTimeout time.Duration // Edge.WriteTimeout
	migration    Migration
	splices      *spliceBudget // the generated text resumable streams keep
	metrics      *pathmetrics.Metrics
	log          *slog.Logger
}

// stream hands the live attempt a to x's client as a streamed response.
func (x *exchange) stream(a *attempt, l *leg) {
	x.watch.stop() // from now on only the response writes to the client
	resp := &x.ctx.Response
	copyResponseHeader(x, &a.resp.Header)
	status := a.status()
	resp.SetStatusCode(status)
	a.streamed = true
	r := &relay{streams: x.path.streams, x: x, a: a, l: l, status: status, sse: isEventStream(a), boundary: true, pending: a.first,
		buf: a.firstBuf, writing: true}
	a.first, a.firstBuf = nil, nil
	if wire.SpeaksAnthropic(x.ctx.Path()) {
		r.opened = usageOf(r.pending)
	}
	if r.splice, r.whyNot = r.streams.newSplice(x, r.sse); r.splice != nil {
		x.mayResume.Store(true)
		r.scratch = firstReads.Get().(*[]byte)
		r.splice.feed(r.pending)
		r.pending = nil
	}
	r.note(r.pending)
	resp.SetBodyStream(r, -1)
	var probe prober
	if r.sse && x.ctx.Request.Header.IsHTTP11() {
		probe = r
	}
	x.watch = x.path.watcher.watch(x.ctx.Conn(), probe, x, time.Now())
}

// Read hands fasthttp the next bytes of the stream. Between two Reads
// fasthttp writes (and flushes) what the first returned.
func (r *relay) Read(b []byte) (int, error) {
	r.setWriting(false)
	n, err := r.read(b)
	r.setWriting(true)
	return n, err
}

// setWriting records whether fasthttp may be writing. The first Read comes
// before the headers are flushed: fasthttp is writing until the second.
// When fasthttp is about to write, the client has --write-timeout-secs for
// this chunk, and never past the request's deadline: a client that stops
// reading is cut, whatever the stream's length, and one that reads slowly
// holds its worker no longer than --request-timeout-secs.
func (r *relay) setWriting(w bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !w && r.reads == 0 {
		r.reads++
		return
	}
	r.writing = w
	if w {
		_ = r.x.ctx.Conn().SetWriteDeadline(r.writeDeadline())
	}
}

// writeDeadline is when the next write to the client must be done: the
// sooner of the write timeout and the request's deadline. The error event
// of a stream that failed (the deadline passing among other causes) gets
// errorEventWriteTimeout of its own, so the client learns why it ends.
func (r *relay) writeDeadline() time.Time {
	now := time.Now()
	if r.failed != nil {
		return now.Add(min(r.streams.writeTimeout, errorEventWriteTimeout))
	}
	d := now.Add(r.streams.writeTimeout)
	if r.x.deadline.Before(d) {
		return r.x.deadline
	}
	return d
}

// errorEventWriteTimeout bounds writing a failed stream's error event.
const errorEventWriteTimeout = time.Second

// cutByDeadline reports whether werr, the error that ended the writing, is
// the request's deadline passing while a write waited on the client: the
// router cut the stream, the client did not leave.
func (r *relay) cutByDeadline(werr error) bool {
	return errors.Is(werr, os.ErrDeadlineExceeded) && !time.Now().Before(r.x.deadline)
}

// pastDeadline reports whether failed, why the worker's stream broke, is
// the request's deadline passing while the relay waited on the worker: the
// same deadline as a write's, met on the other side of the relay. Which of
// the two waits it meets is a matter of scheduling, so both count the same.
func (r *relay) pastDeadline(failed error) bool {
	return errors.Is(failed, failure.ErrUpstreamTimeout) && !time.Now().Before(r.x.deadline)
}

// timedOut is how a stream cut at the request's deadline ends for the
// client: the router's 504 request_timeout, whichever side was waiting.
var timedOut = ending{status: fasthttp.StatusGatewayTimeout, errType: "request_timeout"}

func (r *relay) read(b []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	if r.splice != nil {
		return r.readSpliced(b)
	}
	if r.failed != nil {
		return r.failRead(b)
	}
	if r.complete {
		return 0, io.EOF
	}
	n, err := r.readArrived(b)
	r.note(b[:n])
	switch err {
	case nil:
		return n, nil
	case io.EOF:
		r.complete = true
		return n, io.EOF
	}
	r.fail(err)
	if n > 0 {
		return n, nil
	}
	return r.failRead(b)
}

// readArrived reads what the worker sent next: at least one read of its
// body, which may wait for it, and then whatever more has already arrived
// and fits in b, read without waiting. Events that arrived together go out
// to the client in one chunk, one write, instead of one write each, and no
// event waits for the next one.
func (r *relay) readArrived(b []byte) (int, error) {
	body := r.a.resp.BodyStream()
	n, err := body.Read(b)
	for err == nil && n < len(b) && nextReadReady(r.a.conn.br, r.a.resp.Header.ContentLength()) {
		var m int
		m, err = body.Read(b[n:])
		n += m
	}
	return n, err
}

// nextReadReady reports whether the next read of a body framed as
// contentLength says (-1 chunked, -2 to the end of the connection, else
// its length) is served from what br holds, without waiting for the
// worker: for a chunked body, the next chunk is there whole, its size line
// and its closing CRLF included.
func nextReadReady(br *bufio.Reader, contentLength int) bool {
	buffered := br.Buffered()
	if contentLength != -1 || buffered == 0 {
		return buffered > 0
	}
	b, _ := br.Peek(buffered)
	line := bytes.IndexByte(b, '\n')
	if line < 1 || b[line-1] != '\r' {
		return false
	}
	size, ok := chunkSize(b[:line-1])
	if !ok {
		return false
	}
	if size == 0 {
		return bytes.HasPrefix(b[line+1:], []byte("\r\n")) // the last chunk, without trailers
	}
	return len(b)-(line+1) >= size+2
}

// chunkSize parses a chunk's size line, less its CRLF; a line with
// extensions or anything unusual is not parsed (the caller then waits for
// a read of its own).
func chunkSize(line []byte) (int, bool) {
	if len(line) == 0 || len(line) > 8 {
		return 0, false
	}
	size := 0
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			size = size<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			size = size<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			size = size<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return size, true
}

// note records relayed bytes: progress for health, and where the stream
// stands between events.
func (r *relay) note(b []byte) {
	if len(b) == 0 {
		return
	}
	n := r.events.feed(b)
	r.a.track.Progress(n)
	r.usage.keep(b)
	if len(b) >= len(r.tail) {
		copy(r.tail[:], b[len(b)-len(r.tail):])
	} else {
		copy(r.tail[:], r.tail[len(b):])
		copy(r.tail[len(r.tail)-len(b):], b)
	}
	r.mu.Lock()
	r.boundary = r.tail[2] == '\n' && r.tail[3] == '\n' || string(r.tail[:]) == "\r\n\r\n"
	r.mu.Unlock()
}

// tokens is how many tokens the stream carried: the completion tokens of
// the engine's final usage chunk when it sent one (stream_options'
// include_usage, or the Responses API's completed event), else one per
// data event but the last, [DONE].
func (r *relay) tokens() int {
	if n := requestlog.CompletionTokens(r.usage.bytes()); n > 0 {
		return n
	}
	return max(r.events.n-1, 0)
}

// engineUsage is what the stream said of its prompt: its last usage, else,
// when that names no prompt tokens, its first event's.
func (r *relay) engineUsage() core.Usage {
	if u := usageOf(r.usage.bytes()); u.PromptTokens > 0 {
		return u
	}
	return r.opened
}

// sseCount counts the data lines of an SSE stream as it passes, read by
// read: a "data:" at the start of a line, wherever the reads cut it.
type sseCount struct {
	n     int
	carry [len(dataLine) - 1]byte // the bytes before the next read; starts as after a newline
	began bool
}

// dataLine is what starts an SSE data line after the first.
const dataLine = "\ndata:"

// feed counts the data lines that end in b, and returns how many.
func (c *sseCount) feed(b []byte) int {
	if !c.began {
		c.began = true
		c.carry[len(c.carry)-1] = '\n'
	}
	var window [2*len(dataLine) - 2]byte
	w := append(append(window[:0], c.carry[:]...), b[:min(len(b), len(c.carry))]...)
	n := 0
	for i := 0; i < len(c.carry) && i+len(dataLine) <= len(w); i++ {
		if string(w[i:i+len(dataLine)]) == dataLine {
			n++
		}
	}
	n += bytes.Count(b, []byte(dataLine))
	if len(b) >= len(c.carry) {
		copy(c.carry[:], b[len(b)-len(c.carry):])
	} else {
		copy(c.carry[:], c.carry[len(b):])
		copy(c.carry[len(c.carry)-len(b):], b)
	}
	c.n += n
	return n
}

// streamTail keeps the last bytes of a stream: enough for the final usage
// chunk and the [DONE] after it.
type streamTail struct {
	buf [2 << 10]byte
	n   int
}

func (t *streamTail) keep(b []byte) {
	if len(b) >= len(t.buf) {
		t.n = copy(t.buf[:], b[len(b)-len(t.buf):])
		return
	}
	if over := t.n + len(b) - len(t.buf); over > 0 {
		t.n = copy(t.buf[:], t.buf[over:t.n])
	}
	t.n += copy(t.buf[t.n:], b)
}

func (t *streamTail) bytes() []byte { return t.buf[:t.n] }

// fail records why the worker's stream broke, and prepares the error event.
func (r *relay) fail(err error) {
	r.outcome, r.failed = r.a.failure(err)
	if r.whyNot != nil && r.outcome != Canceled {
		r.streams.metrics.Migrations.Unresumable.Inc()
	}
	if r.sse && r.boundary && r.outcome != Canceled {
		r.event = failure.SSEEvent(r.x.ctx.Path(), r.failed)
	}
}

// failRead hands out the error event, then the failure itself.
func (r *relay) failRead(b []byte) (int, error) {
	if len(r.event) > 0 && len(b) >= len(r.event) {
		n := copy(b, r.event)
		r.event = nil
		return n, nil
	}
	return 0, r.failed
}

// CloseWithError ends the stream: fasthttp calls it once the response is
// written, with the error that ended the writing (the relay's own failure,
// or a client that went away), or nil.
func (r *relay) CloseWithError(werr error) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	if r.buf != nil {
		firstReads.Put(r.buf)
		r.buf = nil
	}
	e := r.end(werr)
	r.endSplice()
	r.x.finish(e)
	return nil
}

// end ends the stream's attempt as the stream ended, and reports to the
// exchange how it ended for the client.
func (r *relay) end(werr error) ending {
	switch {
	case r.failed != nil:
		r.a.end(r.outcome, false)
		cut := r.outcome != Canceled
		if cut {
			r.streams.metrics.StreamErrors.Inc()
		}
		if cut && r.pastDeadline(r.failed) {
			return timedOut
		}
		return ending{status: r.status, cut: cut}
	case r.complete && werr == nil:
		r.a.end(outcomeOf(r.status), r.a.reusable())
		u := r.engineUsage()
		r.l.judge(r.status, u)
		if events := r.events.n; events > 2 {
			r.streams.metrics.TPOT.Update(time.Since(r.x.firstByte).Seconds() / float64(events-2))
		}
		return ending{status: r.status, tokens: r.tokens(), usage: u}
	case r.cutByDeadline(werr):
		r.a.end(Canceled, false) // the worker was keeping up: nothing against it
		r.streams.metrics.StreamErrors.Inc()
		return timedOut
	default: // the client went away before the stream ended
		r.x.clientGone()
		o := Canceled
		if r.complete {
			o = outcomeOf(r.status)
		}
		r.a.end(o, false)
		return ending{status: r.status}
	}
}

// keepaliveChunk is an SSE comment in one chunk of chunked framing: SSE
// clients skip it. It probes a half-closed client while the stream is quiet.
var keepaliveChunk = []byte("d\r\n: keepalive\n\n\r\n")

// probe writes a keepalive comment to the client while fasthttp is not
// writing and the stream stands between events; at other times it writes
// nothing (fasthttp's own writes will find a client that is gone).
func (r *relay) probe(conn net.Conn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writing || r.closed || !r.boundary {
		return nil
	}
	_ = conn.SetWriteDeadline(time.Now().Add(probeWriteTimeout)) // the next chunk sets its own
	_, err := conn.Write(keepaliveChunk)
	return err
}
