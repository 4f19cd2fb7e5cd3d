package loadsync

import (
	"encoding/binary"
	"slices"
)

// Counted says which of the tier's placer's answers to this replica's
// questions a load report counts: every question numbered up to Through,
// and the ones in Also above it (answered or given up while an earlier one
// was still out). The placer holds a reservation for each answer it gave
// until the asker's load report counts the request; this is how it learns
// when, so its view counts each placed request once, neither twice while
// both hold it nor not at all while the report is on its way.
type Counted struct {
	Through uint64
	Also    []uint64
}

// MaxCountedAlso bounds Counted.Also, sent and received: the questions a
// replica has in flight at once above its oldest one. Questions past it
// wait for the next report, or for the placer's bound.
const MaxCountedAlso = 256

func (c Counted) equal(o Counted) bool {
	return c.Through == o.Through && slices.Equal(c.Also, o.Also)
}

// countedReport is the packet that follows this tick's load report when
// what it counts changed since the last one sent, or nil. It is read before
// the loads (CountedAnswers), so every request it names is in them unless
// it already finished. loadMu is held.
func (s *State) countedReport(c Counted) []byte {
	if c.equal(s.counted) {
		return nil
	}
	s.counted = Counted{Through: c.Through, Also: append(s.counted.Also[:0], c.Also...)}
	return appendCounted(make([]byte, 0, 32+len(c.Also)*2), s.cfg.Origin, c)
}

// appendCounted encodes c as header, origin (string), through, count, then
// the Also numbers as gaps: the first from Through, each next from the one
// before (uvarints, at least 1: Also is strictly increasing).
func appendCounted(b []byte, origin string, c Counted) []byte {
	b = appendHeader(b, msgCounted)
	b = appendString(b, origin)
	b = binary.AppendUvarint(b, c.Through)
	b = binary.AppendUvarint(b, uint64(len(c.Also)))
	prev := c.Through
	for _, n := range c.Also {
		b = binary.AppendUvarint(b, n-prev)
		prev = n
	}
	return b
}

func decodeCounted(r *reader) (string, Counted, error) {
	origin := r.str()
	c := Counted{Through: r.uvarint()}
	n := r.count(1)
	if r.err() == nil && n > MaxCountedAlso {
		r.fail("%d counted answers above the first, over %d", n, MaxCountedAlso)
	}
	if r.err() != nil {
		return "", Counted{}, r.err()
	}
	prev := c.Through
	for range n {
		gap := r.uvarint()
		if r.err() == nil && (gap == 0 || prev+gap < prev) {
			r.fail("answer numbers not increasing")
		}
		if r.err() != nil {
			return "", Counted{}, r.err()
		}
		prev += gap
		c.Also = append(c.Also, prev)
	}
	return origin, c, r.end()
}

// receiveCounted hands a peer's counted answers to OnCounted. It follows
// the peer's load report of the same tick, which is applied by then.
func (s *State) receiveCounted(r *reader) error {
	origin, c, err := decodeCounted(r)
	if err != nil {
		return err
	}
	if origin == s.cfg.Origin || s.cfg.OnCounted == nil {
		return nil
	}
	s.cfg.OnCounted(origin, c)
	return nil
}
