package proxy

import (
	"errors"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// Preemption by resume (--preempt-by-resume). With --lend-reserved-slots a
// lower class borrows the slots a higher class reserved and leaves unused,
// and a request of the higher class takes its slot back over the engines'
// bound (admission.Ticket.TookBack). The engine is full, though: vLLM v1
// preempts no running request for a waiting one, so without this the
// request waits at the engine for a borrower to end (BENCHMARKS.md: 70x
// the interactive TTFT p99). With it, the request's worker gives up a
// borrower's stream at its next chunk: the borrower's request is ended at
// the engine (its connection closed, which frees the slot), its admission
// goes back to the queue ahead of the requests that have not begun, and
// once it is admitted again the stream resumes where it stopped, as a
// migrated one does (migrate.go), on the worker the regular decision picks:
// its own most often, which holds the prompt and the text so far. Its
// client sees a pause, never an error.

// preemption is the hook that picks the stream to give way.
type preemption struct {
	flights *flights // the exchanges in flight, among them the borrowers
	metrics pathmetrics.Preemptions
}

var _ pickHearer = (*preemption)(nil)

// picked asks, for an exchange that took its slot back and whose answer
// attempt a goes to its worker, one borrower's stream on that worker to
// give way; once per exchange, on its first such attempt.
func (p *preemption) picked(x *exchange, l *leg, a *attempt) {
	if x.ticket == nil || !x.ticket.TookBack() || !l.toClient || x.route.TookBack {
		return
	}
	x.route.TookBack = true
	y := p.borrowerOn(a.m.ID, x.ticket.Request().Class, x)
	if y == nil {
		p.metrics.NoBorrower.Inc()
		return
	}
	gone := y.guard.markGiveWay(a.m.ID)
	if gone == nil {
		p.metrics.NoBorrower.Inc()
		return
	}
	p.metrics.Marked.Inc()
	// x goes to the engine once the borrower's request is ended there, so
	// that the engine finds the slot free when x arrives rather than at its
	// next step; a borrower slow to answer (its client slow to read) is
	// not waited for long.
	t := time.NewTimer(giveWayWait)
	defer t.Stop()
	select {
	case <-gone:
	case <-t.C:
	case <-x.life.Done():
	}
}

// giveWayWait bounds how long a request waits for a borrower to give way
// before it goes to the engine anyway, to wait there for the slot.
const giveWayWait = 20 * time.Millisecond

// borrowerOn is the stream that gives way for x, of class c, on worker w:
// of a lower class, streaming on w, able to resume, its client still
// there (one that left frees its slot anyway), the youngest (the one
// that started last: a stream preempted before keeps its start, so the
// same one is not picked every time).
func (p *preemption) borrowerOn(w affinity.WorkerID, c admission.Class, x *exchange) *exchange {
	var out *exchange
	for _, y := range p.flights.all() {
		if y == x || y.ticket == nil || y.ticket.Request().Class <= c || !y.mayResume.Load() || y.life.why() != nil ||
			!y.guard.on(w) {
			continue
		}
		if out == nil || y.start.After(out.start) {
			out = y
		}
	}
	return out
}

// giveWay ends the stream's attempt at its engine, so that the slot it
// held goes to the request that took it back, waits for admission to let
// the stream in again, and resumes the generation where it stopped; read
// is how the read it was asked during ended (nil, or the interruption,
// whose partial event is dropped and generated again). A stream that can
// no longer resume (it finished, or its splice refused a shape since)
// stays where it is, its read deadline restored; false when read was a
// failure of the worker's, for the relay to handle. A preemption does not
// count against --migration-limit: it is the router's doing.
func (r *relay) giveWay(read error) bool {
	m := r.streams.metrics.Preemptions
	if !r.splice.resumable() {
		r.a.gaveWay()
		m.Unresumable.Inc()
		if read != nil && !errors.Is(read, os.ErrDeadlineExceeded) {
			return false
		}
		_ = r.a.conn.SetReadDeadline(r.a.conn.deadline)
		return true
	}
	start := time.Now()
	old := r.a
	old.end(Canceled, false)
	r.x.route.NoteStreamed(old.m.ID)
	r.x.route.Preempted++
	if err := r.x.path.admission.Readmit(r.x.ticket, r.x.deadline, &r.x.life, r.x.life.why); err != nil {
		m.Failed.Inc()
		r.fail(err)
		return true
	}
	live, l, err := r.x.resumeOn(r.splice, nil)
	if err != nil {
		m.Failed.Inc()
		r.fail(err)
		return true
	}
	r.switchTo(live, l)
	m.Resumed.Inc()
	m.Pause.UpdateDuration(start)
	return true
}
