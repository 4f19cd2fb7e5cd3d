package core

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/kvevents"
)

// The placer's wire: a question and its answer, each a version byte and
// varints (hashes as fixed 8-byte words). A peer is authenticated by the
// cluster port, but what it sends is still bounded before anything is
// allocated for it.

const (
	// placeWireVersion 3 carries a question's engine block keys
	// (Question.KV) after its candidates. A question without keys is
	// written as version 2, which placers of the version before read: a
	// tier on the text index places across a rolling upgrade.
	placeWireVersion = 3
	// keylessWireVersion 2 named the question (Question.From, Seq).
	keylessWireVersion = 2
	// maxQuestionTokens bounds the tokens a question's keys stand for.
	maxQuestionTokens = 1 << 24
	// maxFromBytes bounds the asker's name (loadsync's origin names are
	// at most 128 bytes).
	maxFromBytes = 128
	// maxCandidates bounds a question's candidate list.
	maxCandidates = 1 << 16
)

// ErrBadPlacement marks a question or an answer that cannot be read.
var ErrBadPlacement = errors.New("core: malformed placement message")

// AppendBinary appends q's encoding to dst.
func (q Question) AppendBinary(dst []byte) []byte {
	version := byte(placeWireVersion)
	if len(q.KV) == 0 {
		version = keylessWireVersion
	}
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(q.From)))
	dst = append(dst, q.From...)
	dst = binary.AppendUvarint(dst, q.Seq)
	dst = binary.AppendUvarint(dst, uint64(q.Full))
	dst = binary.LittleEndian.AppendUint64(dst, q.Tail)
	dst = binary.AppendUvarint(dst, uint64(q.TextLen))
	dst = binary.AppendUvarint(dst, uint64(len(q.Hashes)))
	for _, h := range q.Hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	dst = binary.AppendUvarint(dst, uint64(len(q.Candidates)))
	for _, id := range q.Candidates {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	if version == keylessWireVersion {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(q.Tokens))
	dst = binary.AppendUvarint(dst, uint64(q.TokenText))
	dst = binary.AppendUvarint(dst, uint64(len(q.KV)))
	for _, k := range q.KV {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(k))
	}
	return dst
}

// ParseQuestion reads a question that AppendBinary wrote.
func ParseQuestion(b []byte) (Question, error) {
	w := wireReader{b: b}
	version := w.version(keylessWireVersion, placeWireVersion)
	var q Question
	q.From = w.str(maxFromBytes)
	q.Seq = w.uvarint(1<<63 - 1)
	q.Full = int(w.uvarint(affinity.MaxChainBlocks + 1))
	q.Tail = w.u64()
	q.TextLen = int(w.uvarint(1 << 40))
	n := int(w.uvarint(affinity.MaxChainBlocks + 1))
	if w.err == nil && len(w.b) < 8*n {
		w.fail("%d hashes announced, %d bytes left", n, len(w.b))
	}
	if w.err == nil {
		q.Hashes = make([]uint64, n)
		for i := range q.Hashes {
			q.Hashes[i] = w.u64()
		}
	}
	c := int(w.uvarint(maxCandidates))
	if w.err == nil && len(w.b) < c {
		w.fail("%d candidates announced, %d bytes left", c, len(w.b))
	}
	for range c {
		if w.err != nil {
			break
		}
		q.Candidates = append(q.Candidates, affinity.WorkerID(w.uvarint(1<<31)))
	}
	if version == placeWireVersion {
		q.readKV(&w)
	}
	w.end()
	if w.err == nil && q.Full > len(q.Hashes) {
		w.fail("%d full blocks of %d hashes", q.Full, len(q.Hashes))
	}
	return q, w.err
}

// readKV reads a question's keys: no more than one per token, and no more
// than the bytes left can hold.
func (q *Question) readKV(w *wireReader) {
	q.Tokens = int(w.uvarint(maxQuestionTokens))
	q.TokenText = int(w.uvarint(1 << 40))
	n := int(w.uvarint(maxQuestionTokens))
	switch {
	case w.err != nil:
		return
	case n > q.Tokens || n == 0:
		w.fail("%d keys for %d tokens", n, q.Tokens)
	case len(w.b) < 4*n:
		w.fail("%d keys announced, %d bytes left", n, len(w.b))
	}
	if w.err != nil {
		return
	}
	q.KV = make([]kvevents.Key, n)
	for i := range q.KV {
		q.KV[i] = kvevents.Key(binary.LittleEndian.Uint32(w.b[4*i:]))
	}
	w.b = w.b[4*n:]
}

// AppendPlacement appends the encoding of the placer's decision d to dst.
func AppendPlacement(dst []byte, d affinity.Decision) []byte {
	dst = append(dst, placeWireVersion)
	dst = binary.AppendUvarint(dst, uint64(d.Worker))
	hit := byte(0)
	if d.Hit {
		hit = 1
	}
	dst = append(dst, hit)
	return binary.AppendUvarint(dst, uint64(d.Matched))
}

// ParsePlacement reads a decision that AppendPlacement wrote.
func ParsePlacement(b []byte) (affinity.Decision, error) {
	w := wireReader{b: b}
	w.version(placeWireVersion, placeWireVersion)
	var d affinity.Decision
	d.Worker = affinity.WorkerID(w.uvarint(1 << 31))
	switch w.byte() {
	case 0:
	case 1:
		d.Hit = true
	default:
		w.fail("hit is neither 0 nor 1")
	}
	d.Matched = int(w.uvarint(1 << 40))
	w.end()
	return d, w.err
}

// wireReader reads a message, keeping the first error.
type wireReader struct {
	b   []byte
	err error
}

func (w *wireReader) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%w: %s", ErrBadPlacement, fmt.Sprintf(format, args...))
	}
}

// version reads the version byte, one of oldest to newest.
func (w *wireReader) version(oldest, newest byte) byte {
	v := w.byte()
	if w.err == nil && (v < oldest || v > newest) {
		w.fail("version %d, want %d to %d", v, oldest, newest)
	}
	return v
}

func (w *wireReader) byte() byte {
	if w.err != nil || len(w.b) == 0 {
		w.fail("truncated")
		return 0
	}
	v := w.b[0]
	w.b = w.b[1:]
	return v
}

// str reads a string of at most limit bytes.
func (w *wireReader) str(limit uint64) string {
	n := w.uvarint(limit)
	if w.err == nil && uint64(len(w.b)) < n {
		w.fail("a %d-byte string, %d bytes left", n, len(w.b))
	}
	if w.err != nil {
		return ""
	}
	s := string(w.b[:n])
	w.b = w.b[n:]
	return s
}

func (w *wireReader) u64() uint64 {
	if w.err != nil || len(w.b) < 8 {
		w.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(w.b)
	w.b = w.b[8:]
	return v
}

// uvarint reads a varint no larger than limit.
func (w *wireReader) uvarint(limit uint64) uint64 {
	if w.err != nil {
		return 0
	}
	v, n := binary.Uvarint(w.b)
	if n <= 0 {
		w.fail("truncated varint")
		return 0
	}
	if v > limit {
		w.fail("%d above the bound %d", v, limit)
		return 0
	}
	w.b = w.b[n:]
	return v
}

func (w *wireReader) end() {
	if w.err == nil && len(w.b) > 0 {
		w.fail("%d bytes past the end", len(w.b))
	}
}
