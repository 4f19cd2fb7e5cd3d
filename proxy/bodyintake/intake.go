package bodyintake

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/proxy/edge"
	"github.com/kvrouter/kvrouter/proxy/failure"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// A body is read into a buffer that grows as the body arrives, and is
// charged to the budget of bodies held (budget.go) as it grows: the
// router reserves what has arrived, at most twice it, until the body has
// sent its first MiB; only then is a body of known length given its whole
// length, in one buffer, as before. A client that announces 512 MiB and
// sends a byte a second holds 16 KiB, not the budget. And it does not keep
// even that: past a grace for its first bytes (--body-rate-grace-secs), a
// body must arrive on average at --min-body-rate, and at least at the rate
// that brings it whole within --body-read-timeout-secs (a body that cannot
// arrive in time holds its reservation for nothing), or it is cut with a
// 408 that says so, its connection closed, its share and its admission
// slot given back.

const (
	// firstBodyBuffer is the buffer a body starts in (a smaller body takes
	// its own length).
	firstBodyBuffer = 16 << 10
	// CommitBytes is what a body of known length sends before it is given
	// its whole length; the buffers up to it come from the pools, and the
	// one the commit leaves is given back at once.
	CommitBytes = 1 << 20
)

// Intake is the reading of one body, from Budget.Start until Release.
type Intake struct {
	stream io.Reader
	ctx    *fasthttp.RequestCtx
	budget *Budget
	client Client
	want   int // the announced length; -1: none (chunked)
	max    int // the largest body taken (--max-payload-size)
	pooled bool
	rate   float64       // bytes a second it must arrive at past the grace (requiredRate); 0: none
	grace  time.Duration // --body-rate-grace-secs
	start  time.Time     // when its reading began
	end    time.Time     // --body-read-timeout-secs from the end of its headers

	body []byte  // what arrived, in a buffer of at least size bytes
	size int     // the buffer's size as charged to the budget
	buf  *[]byte // the pool's handle of body's buffer, nil when not pooled

	// mu orders a cut (the budget's, to make room for others) with the
	// deadline the reading sets before each read, so that neither undoes
	// the other.
	mu   sync.Mutex
	cuts bool
}

// intakes are kept for reuse: one a request with a body is not worth an
// allocation.
var intakes = sync.Pool{New: func() any { return new(Intake) }}

// Limits bound the reading of a body.
type Limits struct {
	Max     int           // the largest body taken (--max-payload-size)
	Pooled  bool          // its buffers come from edge's pools
	MinRate float64       // bytes a second it must arrive at past the grace (--min-body-rate); 0: none
	Grace   time.Duration // --body-rate-grace-secs
	Timeout time.Duration // from the end of its headers (--body-read-timeout-secs)
}

// Start begins the reading of ctx's body from stream, announced at n bytes
// (-1: none), charged to b for client.
func (b *Budget) Start(ctx *fasthttp.RequestCtx, stream io.Reader, client Client, n int, lim Limits) *Intake {
	in := intakes.Get().(*Intake)
	in.stream, in.ctx, in.budget, in.client, in.want, in.max = stream, ctx, b, client, n, lim.Max
	in.pooled, in.rate, in.grace = lim.Pooled, lim.MinRate, lim.Grace
	in.start, in.end = time.Now(), ctx.Time().Add(lim.Timeout)
	return in
}

// Held is what the body holds of the budget: its buffer's size.
func (in *Intake) Held() int64 { return int64(in.size) }

// Body is what arrived.
func (in *Intake) Body() []byte { return in.body }

// Buf is the pool's handle of Body's buffer (edge.TakeBody), nil when not
// pooled.
func (in *Intake) Buf() *[]byte { return in.buf }

// Release returns in to intakes once its body belongs to the request: the
// budget no longer knows it (done), so nothing else holds it.
func (in *Intake) Release() {
	in.stream, in.ctx, in.budget, in.body, in.buf, in.size, in.cuts = nil, nil, nil, nil, nil, 0, false
	intakes.Put(in)
}

// Read reads the whole body, or fails with the error to answer: 503 when
// the budget or the client's share has no room for it to grow, 413 past
// the largest body, 408 for a body too slow or too late, 400 for a broken
// one. What it holds is charged either way; the caller gives it back.
func (in *Intake) Read() error {
	defer in.budget.done(in)
	in.rate = in.requiredRate()
	for {
		if len(in.body) == in.size {
			if len(in.body) == in.want {
				return nil
			}
			if err := in.grow(); err != nil {
				return err
			}
		}
		rateDue, err := in.setDeadline()
		if err != nil {
			return err
		}
		n, err := in.stream.Read(in.body[len(in.body):in.size])
		in.body = in.body[:len(in.body)+n]
		switch {
		case len(in.body) > in.max:
			return failure.Errorf(failure.ErrTooLarge, "request body exceeds the limit of %d bytes", in.max)
		case err == io.EOF && (in.want < 0 || len(in.body) == in.want):
			return nil
		case err == io.EOF:
			return failure.Errorf(failure.ErrBadRequest, "malformed HTTP request body")
		case err != nil:
			return in.failed(err, rateDue)
		}
	}
}

// grow moves the body to a larger buffer, charged before it is made:
// twice the size, and for a body of known length its whole length once
// its first MiB arrived. A buffer larger than the pools' stays charged
// until it is copied.
func (in *Intake) grow() error {
	from := in.size
	to := in.nextSize(from)
	if err := in.budget.grow(in, int64(from), int64(to), from > CommitBytes); err != nil {
		return err
	}
	body, buf := in.alloc(to)
	copy(body, in.body)
	in.body, in.size = body[:len(in.body)], to
	edge.GiveBody(in.buf)
	in.buf = buf
	if from > CommitBytes {
		in.budget.release(int64(from))
	}
	return nil
}

// nextSize is the size of the buffer after one of from bytes.
func (in *Intake) nextSize(from int) int {
	switch {
	case from == 0:
		return min(in.target(), firstBodyBuffer)
	case in.want >= 0 && from >= CommitBytes:
		return in.want
	}
	return min(2*from, in.target())
}

// target is the largest buffer the body may need: its length, or for a
// body of no length one byte past the largest body, to see it pass.
func (in *Intake) target() int {
	if in.want >= 0 {
		return in.want
	}
	return in.max + 1
}

// alloc is a buffer of n bytes, from the pools when it may be.
func (in *Intake) alloc(n int) ([]byte, *[]byte) {
	if in.pooled {
		return edge.TakeBody(n)
	}
	return make([]byte, n), nil
}

// requiredRate is the rate the body must arrive at past the grace: the
// larger of --min-body-rate and, for a body of known length, the rate
// that brings it whole by its timeout. 0: none.
func (in *Intake) requiredRate() float64 {
	if in.rate <= 0 {
		return 0
	}
	window := in.end.Sub(in.start.Add(in.grace)).Seconds()
	if in.want <= 0 || window <= 0 {
		return in.rate
	}
	return max(in.rate, float64(in.want)/window)
}

// setDeadline sets the read deadline of the body's next bytes: the rate's
// line (the grace, then a second of credit for each rate's worth of bytes
// arrived), or the body's own timeout if it comes first. It reports
// whether the rate's line is the one set, or the error of a body the
// budget cut.
func (in *Intake) setDeadline() (rateDue bool, err error) {
	at := in.end
	if in.rate > 0 {
		line := in.start.Add(in.grace + time.Duration(float64(len(in.body))/in.rate*float64(time.Second)))
		if line.Before(at) {
			at, rateDue = line, true
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cuts {
		return false, in.cutError()
	}
	_ = in.ctx.SetReadDeadline(at)
	return rateDue, nil
}

// cut ends the reading of the body to make room for other clients: its
// next read, or the one under way, fails (the budget's, budget.go).
func (in *Intake) cut() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cuts = true
	_ = in.ctx.SetReadDeadline(longAgo)
}

func (in *Intake) cutError() error {
	return failure.Errorf(failure.ErrBodiesHeld, "the request body was cut to make room for other clients: this client held more than its share "+
		"(--max-body-share) of the router's request bodies (--max-buffered-body-bytes); retry shortly")
}

// wasCut reports whether the budget cut the body.
func (in *Intake) wasCut() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cuts
}

// failed is the error a read that failed answers with.
func (in *Intake) failed(err error, rateDue bool) error {
	var api *wire.Error
	switch {
	case errors.As(err, &api):
		return err
	case in.wasCut():
		return in.cutError()
	case isTimeout(err) && rateDue:
		elapsed := time.Since(in.start)
		return failure.Errorf(failure.ErrBodyTimeout, "the request body arrived at %.0f bytes a second over %v; past --body-rate-grace-secs it must "+
			"arrive at %.0f: --min-body-rate, or the rate that brings its length within --body-read-timeout-secs, whichever is more",
			float64(len(in.body))/elapsed.Seconds(), elapsed.Round(time.Millisecond), in.rate)
	case isTimeout(err):
		return failure.Errorf(failure.ErrBodyTimeout, "the request was not received in time")
	}
	return failure.Errorf(failure.ErrBadRequest, "malformed HTTP request body")
}

// longAgo is a deadline in the past: set on a connection, it ends the read
// under way at once.
var longAgo = time.Unix(1, 0)

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
