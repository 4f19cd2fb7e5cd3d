package loadsync

import (
	"fmt"
	"strconv"
	"strings"
)

// readable is every message type this build reads, announced to the peers
// in the node metadata (tagTypes) so that no peer is sent a type it does not
// know (Gossip sends a packet only to the members that announced its type).
// A new message type takes one line here and one case in Receive; a peer of
// an older build never hears of it, and one that reads it is sent it.
var readable = newTypeSet(
	msgLoad, msgDigest, msgFullState, msgMeta, msgVerdicts, msgLoadDelta,
	msgQueues, msgCalibrations, msgCounted, msgBacklog,
	msgReport,
)

// legacyReadable is what a peer that announces no types reads: the builds
// before types were announced (v0.1.0 and earlier) read types 1 to 10 and
// counted any other as a decode error.
var legacyReadable = newTypeSet(
	msgLoad, msgDigest, msgFullState, msgMeta, msgVerdicts, msgLoadDelta,
	msgQueues, msgCalibrations, msgCounted, msgBacklog,
)

// supersededBy maps a message type to the one that carries the same news
// more cheaply: a packet of the older type goes only to the peers that do
// not read the newer one (peers of an older build, during an upgrade).
var supersededBy = map[byte]byte{
	msgDigest:       msgReport,
	msgLoad:         msgReport,
	msgLoadDelta:    msgReport,
	msgCalibrations: msgReport,
	msgCounted:      msgReport,
	msgBacklog:      msgReport,
}

// typeSet is a set of message types.
type typeSet [4]uint64

func newTypeSet(types ...byte) typeSet {
	var s typeSet
	for _, t := range types {
		s[t/64] |= 1 << (t % 64)
	}
	return s
}

func (s typeSet) has(t byte) bool { return s[t/64]&(1<<(t%64)) != 0 }

// wants reports whether a peer that reads s is to be sent a packet of
// type t: it reads t, and does not read the type that supersedes t.
func (s typeSet) wants(t byte) bool {
	if !s.has(t) {
		return false
	}
	newer, ok := supersededBy[t]
	return !ok || !s.has(newer)
}

// String lists the set as ranges, "1-10,13", as the metadata announces it.
func (s typeSet) String() string {
	var b strings.Builder
	for t := 0; t < 256; t++ {
		if !s.has(byte(t)) {
			continue
		}
		end := t
		for end < 255 && s.has(byte(end+1)) {
			end++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(t))
		if end > t {
			fmt.Fprintf(&b, "-%d", end)
		}
		t = end
	}
	return b.String()
}

// parseTypeSet reads what String writes.
func parseTypeSet(v string) (typeSet, error) {
	var s typeSet
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.ParseUint(lo, 10, 8)
		b, errB := strconv.ParseUint(hi, 10, 8)
		if errA != nil || errB != nil || a > b {
			return typeSet{}, malformed("message types %q", v)
		}
		for t := a; t <= b; t++ {
			s[t/64] |= 1 << (t % 64)
		}
	}
	return s, nil
}

// intersect is the types both sets hold.
func (s typeSet) intersect(o typeSet) typeSet {
	for i := range s {
		s[i] &= o[i]
	}
	return s
}
