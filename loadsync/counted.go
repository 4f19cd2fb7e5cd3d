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

// appendCounted encodes c as header, origin (string), then its body.
func appendCounted(b []byte, origin string, c Counted) []byte {
	b = appendHeader(b, msgCounted)
	b = appendString(b, origin)
	return appendCountedBody(b, c)
}

// appendCountedBody encodes c as through, count, then the Also numbers as
// gaps: the first from Through, each next from the one before (uvarints, at
// least 1: Also is strictly increasing).
func appendCountedBody(b []byte, c Counted) []byte {
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
	c, err := decodeCountedBody(r)
	if err != nil {
		return "", Counted{}, err
	}
	return origin, c, r.end()
}

func decodeCountedBody(r *reader) (Counted, error) {
	c := Counted{Through: r.uvarint()}
	n := r.count(1)
	if r.err() == nil && n > MaxCountedAlso {
		r.fail("%d counted answers above the first, over %d", n, MaxCountedAlso)
	}
	if r.err() != nil {
		return Counted{}, r.err()
	}
	prev := c.Through
	for range n {
		gap := r.uvarint()
		if r.err() == nil && (gap == 0 || prev+gap < prev) {
			r.fail("answer numbers not increasing")
		}
		if r.err() != nil {
			return Counted{}, r.err()
		}
		prev += gap
		c.Also = append(c.Also, prev)
	}
	return c, nil
}

// receiveCounted hands a peer's counted answers to OnCounted. It follows
// the peer's load report of the same tick, which is applied by then.
func (s *State) receiveCounted(r *reader) error {
	origin, c, err := decodeCounted(r)
	if err != nil {
		return err
	}
	s.heardCounted(origin, c)
	return nil
}

// heardCounted hands origin's Counted to OnCounted.
func (s *State) heardCounted(origin string, c Counted) {
	if origin != s.cfg.Origin && s.cfg.OnCounted != nil {
		s.cfg.OnCounted(origin, c)
	}
}
