package proxy

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/failure"
)

// Migration says when a stream its worker cut after the first byte
// resumes on another worker (resume.go, splice.go).
type Migration struct {
	// Limit is the most times one stream resumes (--migration-limit,
	// default 2); 0 turns migration off.
	Limit int
	// BufferBytes bounds the generated text one stream keeps to resume
	// with, in bytes (--migration-buffer-bytes, default 1 MiB); a stream
	// past it no longer resumes, and fails visibly when cut.
	BufferBytes int
	// TotalBytes bounds what every stream of the replica that may resume
	// keeps at once, that text and its request body, which the
	// continuation is written from (--migration-buffer-total-bytes, default
	// 256 MiB); a stream that finds it full does not resume.
	TotalBytes int64
}

// DefaultMigration is Migration's defaults.
func DefaultMigration() Migration {
	return Migration{Limit: 2, BufferBytes: 1 << 20, TotalBytes: 256 << 20}
}

// errMovedOff: the stream's worker is drained with migration; the stream
// moves at its next chunk boundary.
var errMovedOff = errors.New("the worker is drained: the stream moves to another worker")

// errEngineFailed: the worker's stream carried an error event.
var errEngineFailed = errors.New("the engine sent an error event mid-stream")

// newSplice is the splice of x's stream when it may resume, else nil.
func (st *streaming) newSplice(x *exchange, sse bool) (*splice, error) {
	if st.migration.Limit <= 0 || !sse || !x.in.Stream {
		return nil, nil
	}
	kind, err := resumeKindOf(x)
	if err != nil {
		return nil, err
	}
	// The continuation is written from the body: it is kept, within the
	// replica's bound, until the stream ends.
	if !st.splices.take(len(x.body)) {
		return nil, fmt.Errorf("%w: the replica holds --migration-buffer-total-bytes of streams' text and bodies", errCannotResume)
	}
	x.keptBody = true
	return &splice{kind: kind, limit: st.migration.BufferBytes, budget: st.splices, bodyHeld: len(x.body)}, nil
}

// readSpliced is read for a stream that may resume: the client gets whole
// events only, and a worker that fails is replaced.
func (r *relay) readSpliced(b []byte) (int, error) {
	s := r.splice
	for len(s.out) == s.sent && r.failed == nil && !r.complete {
		r.pull()
	}
	if s.sent < len(s.out) {
		n := copy(b, s.out[s.sent:])
		r.note(b[:n])
		if s.sent += n; s.sent == len(s.out) {
			s.out, s.sent = s.out[:0], 0
		}
		return n, nil
	}
	if r.failed != nil {
		return r.failRead(b)
	}
	return 0, io.EOF
}

// pull reads what the worker sent next into the splice; a worker that
// failed, sent an error event, or is drained is replaced when it can be.
func (r *relay) pull() {
	s := r.splice
	n, err := r.readArrived(*r.scratch)
	s.feed((*r.scratch)[:n])
	if !s.resumable() && r.x.mayResume.Load() {
		r.x.mayResume.Store(false) // finished, or a shape it cannot splice: preemption asks it no more
	}
	switch {
	case s.engineFailed:
		err = errEngineFailed
	case err == io.EOF:
		r.complete = true
		return
	case r.a.giveWay.Load() != nil && (err != nil || len(s.partial) == 0) && r.giveWay(err):
		return
	case err == nil && r.a.moveOff.Load() && s.canResume(r.streams.migration.Limit) && len(s.partial) == 0:
		r.moveOff()
		return
	case err == nil:
		return
	}
	if !r.resume(err) {
		r.fail(err)
	}
}

// resume ends the failed attempt and continues the stream on another
// worker; false when it cannot (the splice's shape, the limit, no worker
// took it, the client left).
func (r *relay) resume(cause error) bool {
	s := r.splice
	if !s.canResume(r.streams.migration.Limit) || r.x.life.why() != nil {
		r.countUnresumable(cause)
		return false
	}
	start := time.Now()
	old := r.a
	o, _ := old.failure(cause)
	old.end(o, false)
	r.x.route.NoteStreamed(old.m.ID)
	live, l, err := r.x.resumeOn(s, r.x.route.Streamed)
	if err != nil {
		r.streams.metrics.Migrations.Failed.Inc()
		r.streams.log.Debug("stream not resumed", "request_id", string(r.x.id), "worker", old.m.ID, "err", err)
		return false
	}
	r.switchTo(live, l)
	r.migrated(start)
	return true
}

// countUnresumable counts a cut stream that could not resume: its shape
// or the limit, not a client that left.
func (r *relay) countUnresumable(cause error) {
	if r.x.life.why() == nil && !errors.Is(cause, errMovedOff) {
		r.streams.metrics.Migrations.Unresumable.Inc()
	}
}

// moveOff moves a stream off its drained worker: the new worker is found
// and live first, and only then is the old one's connection closed, so a
// stream no other worker takes stays where it was.
func (r *relay) moveOff() {
	r.a.moveOff.Store(false)
	start := time.Now()
	old := r.a
	r.x.route.NoteStreamed(old.m.ID)
	live, l, err := r.x.resumeOn(r.splice, r.x.route.Streamed)
	if err != nil {
		if !r.x.guard.attachFor(old, old.conn) { // the client left meanwhile
			r.fail(err)
		}
		return
	}
	old.end(Canceled, false) // nothing against a worker being drained
	r.switchTo(live, l)
	r.migrated(start)
}

// resumeOn starts the continuation of x's stream on a worker not among
// avoid (those the stream failed on or moved off), chosen by the regular
// decision over the conversation, and returns it live: its first bytes
// read.
func (x *exchange) resumeOn(s *splice, avoid []affinity.WorkerID) (*attempt, *leg, error) {
	body, err := continuation(s.kind, x.body, s.text, s.tokens)
	if err != nil {
		return nil, nil, err
	}
	legs := x.path.legs
	router := legs.finalRouter()
	pool, err := legs.poolFor(x, router, legs.finalRole(), x.in.Model)
	if err != nil {
		return nil, nil, err
	}
	key := legs.sessionKey(x)
	pool = pool.Without(avoid...)
	l, planned, err := x.path.hooks.planResume(x, body, pool, key)
	switch {
	case err != nil:
		return nil, nil, err
	case !planned:
		l = legs.newLeg(x, "", router, legs.prepare(router, x, key), pool)
		l.body = body
	}
	l.toClient = false // an answer that is not a stream is read, never the client's
	firstByte := x.firstByte
	live, ans, err := x.path.send.try(x, l)
	x.firstByte = firstByte
	switch {
	case live != nil:
		return live, l, nil
	case ans != nil:
		return nil, nil, failure.Errorf(failure.ErrUpstream, "worker %d answered the stream's continuation with %d", ans.worker, ans.status)
	}
	return nil, nil, err
}

// switchTo makes live the stream's worker.
func (r *relay) switchTo(live *attempt, l *leg) {
	r.a, r.l = live, l
	live.streamed = true
	r.splice.resumed()
	r.splice.feed(live.first)
	firstReads.Put(live.firstBuf)
	live.first, live.firstBuf = nil, nil
}

// migrated counts a stream that resumed after a failure or a drain, cut
// at start: against --migration-limit, and in the metrics.
func (r *relay) migrated(start time.Time) {
	r.splice.resumes++
	r.streams.metrics.Migrations.Resumed.Inc()
	r.streams.metrics.Migrations.Seconds.UpdateDuration(start)
}

// endSplice gives back what the splice holds.
func (r *relay) endSplice() {
	if r.splice == nil {
		return
	}
	r.splice.close()
	firstReads.Put(r.scratch)
	r.scratch = nil
	r.x.route.NoteStreamed(r.a.m.ID)
}

// moveStreamsOff marks the streams in flight on worker w to move, at their next
// chunk boundary, to other workers; it returns how many it marked. A
// stream that cannot resume stays on w.
func (f *flights) moveStreamsOff(w affinity.WorkerID) int {
	n := 0
	for _, x := range f.all() {
		if x.guard.markMoveOff(w) {
			n++
		}
	}
	return n
}

// streamsOn counts the exchanges in flight whose current attempt is on worker w.
func (f *flights) streamsOn(w affinity.WorkerID) int {
	n := 0
	for _, x := range f.all() {
		if x.guard.on(w) {
			n++
		}
	}
	return n
}
