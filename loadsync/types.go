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
		a, b, ok := parseRange(part, 8)
		if !ok {
			return typeSet{}, malformed("message types %q", v)
		}
		for t := a; t <= b; t++ {
			s[t/64] |= 1 << (t % 64)
		}
	}
	return s, nil
}

// parseRange reads "lo-hi" or "n" (n-n) of numbers of at most bits bits,
// as the metadata's types and versions are written.
func parseRange(v string, bits int) (lo, hi uint64, ok bool) {
	a, b, isRange := strings.Cut(v, "-")
	if !isRange {
		b = a
	}
	lo, errA := strconv.ParseUint(a, 10, bits)
	hi, errB := strconv.ParseUint(b, 10, bits)
	return lo, hi, errA == nil && errB == nil && lo <= hi
}

// intersect is the types both sets hold.
func (s typeSet) intersect(o typeSet) typeSet {
	for i := range s {
		s[i] &= o[i]
	}
	return s
}
