package proxy

import (
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/tracing"
)

// attempt is one try of a leg on one worker. From pick to end it owns the
// worker's in-flight guard, the health tracker, the upstream connection and
// response. Its connection is cut when the exchange is aborted (the client
// leaving, the router giving up) or health judges the worker stuck; the
// request's deadline is on the connection. end releases all of them, once,
// on every path.
type attempt struct {
	x       *exchange
	m       *member
	dec     affinity.Decision
	guard   *affinity.Guard
	track   Attempt
	stuck   atomic.Bool // health judged it stuck, and its connection was cut
	moveOff atomic.Bool // its worker is drained with migration: the stream moves (migrate.go)
	// giveWay, when set, asks its stream to give its slot to a request that
	// took it back (preempt.go); the channel is closed once the stream gave
	// way (end) or cannot.
	giveWay  atomic.Pointer[chan struct{}]
	over     chan struct{} // closed by end, when a goroutine waits for stuck
	span     trace.Span    // nil unless tracing
	conn     *upConn
	resp     *fasthttp.Response
	framed   bool // the answer's body has a length or chunks: its end is not the connection's
	streamed bool // the answer went to the client as a stream
	ended    bool
	// first is the first read of a streamed body, made before going live.
	first    []byte
	firstBuf *[]byte
}

// gaveWay tells the request that asked a's stream to give way, if one did,
// that it did or cannot.
func (a *attempt) gaveWay() {
	if c := a.giveWay.Swap(nil); c != nil {
		close(*c)
	}
}

// pick chooses the worker of the leg's next attempt and admits it through
// its circuit. A worker whose circuit refuses is taken out of the leg at no
// cost of an attempt.
func (s *sender) pick(x *exchange, l *leg) (*attempt, error) {
	for {
		dec, guard, err := l.choose()
		if err != nil {
			return nil, failure.Errorf(failure.ErrNoWorker, "no eligible %sworker for model %q", phaseWord(l.phase), x.in.Model)
		}
		m := s.fleet.view().members[dec.Worker]
		if m == nil {
			guard.Release()
			l.exclude(dec.Worker) // it left the registry
			continue
		}
		track, err := s.health.Begin(dec.Worker)
		if err != nil {
			guard.Release()
			l.exclude(dec.Worker)
			continue
		}
		if !l.counted && !l.pinned && l.countsCacheOutcome() {
			s.metrics.Decision(dec)
			m.counters.CountOutcome(dec)
		}
		l.counted = true
		if x.routed.IsZero() {
			x.routed = time.Now()
		}
		x.noteAttempt(l, dec, m.counters)
		if m.counters != nil && !l.pinned {
			m.counters.Decisions[l.router.Policy().Name()].Inc()
		}
		a := x.newAttempt(m, dec, guard, track)
		a.span = x.trace.Attempt(dec.Worker, l.phase)
		return a, nil
	}
}

func phaseWord(phase string) string {
	if phase == "" {
		return ""
	}
	return phase + " "
}

// newAttempt makes an attempt of x: the exchange's first one lives inside
// it (most exchanges make one), later ones are allocated.
func (x *exchange) newAttempt(m *member, dec affinity.Decision, guard *affinity.Guard, track Attempt) *attempt {
	a := &x.first
	if x.firstTaken {
		a = new(attempt)
	}
	x.firstTaken = true
	*a = attempt{x: x, m: m, dec: dec, guard: guard, track: track}
	if n, ok := track.(stuckNotifier); ok {
		n.OnStuck(a.abandon) // no goroutine per attempt: health starts one if it is ever stuck
	} else if stuck := track.Stuck(); stuck != nil {
		a.over = make(chan struct{})
		go a.abandonWhen(stuck)
	}
	return a
}

// abandonWhen abandons the attempt when stuck closes, unless the attempt
// ends first.
func (a *attempt) abandonWhen(stuck <-chan struct{}) {
	select {
	case <-stuck:
		a.abandon()
	case <-a.over:
	}
}

// abandon cuts the attempt's connection: health judged it stuck. An attempt
// that already ended owns no connection any more, and nothing is cut.
func (a *attempt) abandon() {
	a.stuck.Store(true)
	a.x.guard.cutAttempt(a)
}

// send writes the request and reads the response headers.
func (a *attempt) send(body []byte) error {
	req := a.x.upstreamRequest(a.m)
	tracing.Inject(a.span, &req.Header)
	a.resp = fasthttp.AcquireResponse()
	conn, err := a.m.up.exchange(&a.x.life, attemptConn{a}, req, body, a.resp, a.x.start, a.x.deadline)
	if err != nil {
		return err
	}
	a.conn = conn
	a.framed = a.resp.Header.ContentLength() != -2
	a.track.Progress(0)
	return nil
}

// goLive reads the first bytes of a's streamed body. A failure before any
// byte is a failed attempt like any other; an empty body is a whole answer.
func (s *sender) goLive(a *attempt) (*attempt, *answer, error) {
	if err := a.startStream(); err != nil {
		o, e := a.failure(err)
		a.end(o, false)
		return nil, nil, e
	}
	buf := firstReads.Get().(*[]byte)
	n, err := readSome(a.resp.BodyStream(), *buf)
	switch {
	case n == 0 && err == io.EOF:
		firstReads.Put(buf)
		return nil, s.emptyAnswer(a), nil
	case err != nil && err != io.EOF:
		firstReads.Put(buf)
		o, e := a.failure(err)
		a.end(o, false)
		return nil, nil, e
	}
	a.first, a.firstBuf = (*buf)[:n], buf
	a.x.firstByte = time.Now()
	a.guard.Prefilled() // the engine has computed the prompt: no longer its worker's backlog
	return a, nil, nil
}

// readSome reads at least one byte from r, or fails.
func readSome(r io.Reader, b []byte) (int, error) {
	for {
		n, err := r.Read(b)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// status is the worker's answer status; valid after send.
func (a *attempt) status() int { return a.resp.StatusCode() }

// readWhole reads the answer's body whole into a.resp (into pooled
// buffers, so reading one allocates nothing per byte), refusing one over
// limit bytes.
func (a *attempt) readWhole(limit int) error {
	if !hasBody(a.status()) {
		return nil
	}
	err := readBody(a.conn.br, a.resp, limit)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return failure.Errorf(failure.ErrAnswerTooLarge, "worker %d answered more than the limit of %d bytes (--max-response-size)", a.m.ID, limit)
	}
	if err == nil {
		a.track.Progress(0)
	}
	return err
}

// startStream makes the answer's body readable, as it comes, through
// a.resp.BodyStream().
func (a *attempt) startStream() error {
	a.resp.StreamBody = true
	return a.resp.ReadBody(a.conn.br, 0)
}

// reusable reports whether the connection may serve another request once
// the body was read to its end: the worker keeps it alive and framed the
// body (a body that ends with the connection leaves nothing to reuse).
func (a *attempt) reusable() bool {
	return !a.resp.ConnectionClose() && a.framed
}

// failure says what a failed send or body read means: the outcome for the
// breaker, and the error that decides whether another attempt is made.
func (a *attempt) failure(err error) (Outcome, error) {
	switch {
	case a.x.life.why() != nil:
		return Canceled, a.x.life.why()
	case a.stuck.Load():
		return Failed, failure.Errorf(failure.ErrUpstream, "worker %d made no progress and was abandoned", a.m.ID)
	case errors.Is(err, failure.ErrAnswerTooLarge):
		return Failed, err
	case isTimeout(err):
		return Failed, failure.Errorf(failure.ErrUpstreamTimeout, "worker %d did not answer within the request timeout", a.m.ID)
	}
	var de *dialError
	if errors.As(err, &de) {
		return Failed, failure.Errorf(failure.ErrUpstream, "could not connect to worker %d", a.m.ID)
	}
	return Failed, failure.Errorf(failure.ErrUpstream, "worker %d broke off its answer", a.m.ID)
}

// end finishes the attempt once: the connection goes back to the pool when
// reusable, else it is closed; the guard is released; health hears the
// outcome; the attempt's context ends.
func (a *attempt) end(o Outcome, reusable bool) {
	if a.ended {
		return
	}
	a.ended = true
	if a.resp != nil {
		_ = a.resp.CloseBodyStream()
	}
	if a.conn != nil {
		intact := a.x.guard.detach(a.conn)
		// The connection's idle time starts now, at the end of its answer,
		// not at the exchange's start: a long answer read whole is as
		// reusable as a short one.
		a.m.up.release(a.conn, reusable && intact, time.Now())
		if o != Canceled && a.m.counters != nil {
			a.m.counters.Processed.Inc() // the worker answered this one
		}
	}
	status := 0 // no answer had come
	if a.resp != nil {
		if a.conn != nil {
			status = a.resp.StatusCode()
		}
		fasthttp.ReleaseResponse(a.resp)
		a.resp = nil
	}
	tracing.EndAttempt(a.span, outcomeName(o), o == Failed, status)
	a.guard.Release()
	a.track.End(o)
	a.gaveWay()
	if a.over != nil {
		close(a.over)
	}
}
