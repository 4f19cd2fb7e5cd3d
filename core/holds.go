package core

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
)

// A placed request is counted once on the placer's view. The placer
// reserves the worker it chose for a peer's question (a hold) and the asker
// reserves it again when the answer arrives; the asker's load report
// carries the second reservation to the placer. The hold must end exactly
// when that report has arrived: earlier, the request is counted nowhere on
// the placer's view; later, twice. A fixed hold did either on a loaded host,
// where an answer and a report take milliseconds more or less, and a burst
// of new sessions spread 12-19 a worker where one router placed 16 on each.
//
// So questions are numbered by the asker (ask), which settles each one
// (settle) once its reservation is in its loads, or once it gave up on the
// answer; its load report says which are settled (loadsync.Counted), read
// before the loads, and the placer ends the holds of those (OnCounted). A
// report that never comes (a lost packet, a peer of an older build, an
// asker gone) leaves the hold to the bound (holdBound, Placement.Unhold).

// questions numbers this replica's questions to the placer and tracks which
// are settled.
type questions struct {
	mu sync.Mutex
	// last is the number of the newest question, and out the numbers
	// asked and not settled, in increasing order.
	last uint64
	out  []uint64
}

// ask numbers a new question; it is out until settle.
func (q *questions) ask() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last++
	q.out = append(q.out, q.last)
	return q.last
}

func (q *questions) settle(n uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := slices.BinarySearch(q.out, n); ok {
		q.out = slices.Delete(q.out, i, i+1)
	}
}

// counted is every question settled: all up to the oldest one out, and the
// settled ones above it (at most loadsync.MaxCountedAlso, the lowest).
func (q *questions) counted() loadsync.Counted {
	q.mu.Lock()
	defer q.mu.Unlock()
	last := q.last
	if len(q.out) == 0 {
		return loadsync.Counted{Through: last}
	}
	c := loadsync.Counted{Through: q.out[0] - 1}
	out := q.out[1:]
	for n := q.out[0] + 1; n <= last && len(c.Also) < loadsync.MaxCountedAlso; n++ {
		if len(out) > 0 && out[0] == n {
			out = out[1:]
			continue
		}
		c.Also = append(c.Also, n)
	}
	return c
}

// holds are the placer's reservations for its peers' questions, by asker and
// question number.
type holds struct {
	mu sync.Mutex
	by map[string]map[uint64]*affinity.Guard
	// released counts holds ended by the asker's report and by the bound.
	byReport, byBound atomic.Uint64
}

func (h *holds) add(from string, n uint64, g *affinity.Guard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = make(map[string]map[uint64]*affinity.Guard)
	}
	m := h.by[from]
	if m == nil {
		m = make(map[uint64]*affinity.Guard)
		h.by[from] = m
	}
	if old := m[n]; old != nil {
		old.Release() // an asker that restarted and numbers anew
	}
	m[n] = g
}

// take removes and returns the hold of from's question n, nil if none.
func (h *holds) take(from string, n uint64) *affinity.Guard {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.by[from][n]
	h.drop(from, n)
	return g
}

// drop forgets from's question n, and from once it holds none. h.mu is
// held.
func (h *holds) drop(from string, n uint64) {
	delete(h.by[from], n)
	if len(h.by[from]) == 0 {
		delete(h.by, from)
	}
}

// counted ends the holds of from's questions that c names.
func (h *holds) counted(from string, c loadsync.Counted) {
	h.mu.Lock()
	var done []*affinity.Guard
	for n, g := range h.by[from] {
		if _, also := slices.BinarySearch(c.Also, n); n <= c.Through || also {
			done = append(done, g)
			h.drop(from, n)
		}
	}
	h.mu.Unlock()
	for _, g := range done {
		g.Release()
	}
	h.byReport.Add(uint64(len(done)))
}

// unhold ends the placer's hold for from's question n if the asker's report
// has not ended it yet: the bound, holdBound after the answer.
func (h *holds) unhold(from string, n uint64) {
	if g := h.take(from, n); g != nil {
		g.Release()
		h.byBound.Add(1)
	}
}

// HoldsEnded counts the placer's holds ended by the asker's load report and
// by the bound (Placement.Unhold).
func (r *Replica) HoldsEnded() (byReport, byBound uint64) {
	return r.holds.byReport.Load(), r.holds.byBound.Load()
}
