package loadsync

import (
	"encoding/binary"
	"math"
)

// Every message starts with a one-byte type and a one-byte protocol version.
// Integers are varints (zigzag for signed ones) except block hashes, which
// are uniformly distributed and so take a fixed 8 bytes little-endian.
//
// How the gossip evolves without breaking a tier (docs/compatibility.md):
// the protocol version changes only with a change no older build can read,
// and builds of different versions are refused at join. Anything else is
// added: a new message type, sent only to the peers that announce they read
// it (types.go); a new field at the end of a message, which older builds
// skip (reader.end). A type a replica does not know is skipped and counted
// as unknown, never as a decode error.
const (
	// protocolVersion 2 added the span to every ownership fact; 3 added
	// delta load reports and made in-flight counts unsigned.
	protocolVersion byte = 3

	msgLoad      byte = 1 // a load report, or one worker-id range of it
	msgDigest    byte = 2 // a batch of new ownership facts
	msgFullState byte = 3 // the recent ownership facts, for push/pull
	msgMeta      byte = 4 // node metadata: origin, epoch, cluster config, tags
	msgVerdicts  byte = 5 // an origin's verdicts against workers
	msgLoadDelta byte = 6 // the counts that changed since the origin's last full load report
	msgQueues    byte = 7 // an origin's admission queue depths per class and tenant
	// msgCalibrations carries an origin's judgements of predicted hits per
	// worker since its last report. Superseded by msgReport's section.
	msgCalibrations byte = 8
	// msgCounted says which of the placer's answers an origin's load
	// report counts (Counted); it follows that report. Superseded by
	// msgReport's section.
	msgCounted byte = 9
	// msgBacklog is an origin's prefill backlog per worker, laid out as a
	// full load report (loadreport.go), bytes of uncached prompt in place
	// of requests. Superseded by msgReport's sections.
	msgBacklog byte = 10
	// Types 11 and 12 are taken by the relay of the engines' KV events.
	//
	// msgReport is a load report in one packet (more when its full part
	// does not fit one): a step of the counts changed since the previous
	// report, or the full counts or a cumulative delta, and beside them the
	// prefill backlogs, the counted answers and the calibrations, each a
	// section a reader that does not know it skips (report.go).
	msgReport byte = 13

	headerBytes = 2
	// maxNameBytes bounds an origin name and a config field name or value.
	maxNameBytes = 128
	// factMinBytes is the smallest encoding of one fact (1-byte worker
	// and span).
	factMinBytes = 1 + 1 + 8
	// factMaxBytes is the largest encoding of one fact (5-byte worker and
	// span).
	factMaxBytes = 2*binary.MaxVarintLen32 + 8
)

func appendHeader(b []byte, typ byte) []byte { return append(b, typ, protocolVersion) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// readHeader checks the header of msg and returns its type and a reader
// positioned after it.
func readHeader(msg []byte) (byte, reader, error) {
	if len(msg) < headerBytes {
		return 0, reader{}, malformed("%d bytes, shorter than a header", len(msg))
	}
	if msg[1] != protocolVersion {
		return msg[0], reader{}, versionError(msg[1])
	}
	return msg[0], reader{buf: msg, off: headerBytes}, nil
}

// reader decodes a message with every read bounds-checked. The first failure
// sticks: later reads return zero values and err() reports it.
type reader struct {
	buf []byte
	off int
	bad error
}

func (r *reader) fail(format string, args ...any) {
	if r.bad == nil {
		r.bad = malformed(format+" at byte %d", append(args, r.off)...)
	}
}

func (r *reader) err() error { return r.bad }

func (r *reader) remaining() int { return len(r.buf) - r.off }

func (r *reader) uvarint() uint64 {
	if r.bad != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.bad != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad signed varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) uint32v() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail("value %d over 32 bits", v)
		return 0
	}
	return uint32(v)
}

func (r *reader) byte() byte {
	if r.bad != nil {
		return 0
	}
	if r.remaining() < 1 {
		r.fail("truncated byte")
		return 0
	}
	r.off++
	return r.buf[r.off-1]
}

func (r *reader) fixed64() uint64 {
	if r.bad != nil {
		return 0
	}
	if r.remaining() < 8 {
		r.fail("truncated hash")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.buf[r.off:])
	r.off += 8
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.bad != nil {
		return ""
	}
	if n > maxNameBytes || int(n) > r.remaining() {
		r.fail("string of %d bytes", n)
		return ""
	}
	s := string(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

// count reads an element count and checks that the rest of the message can
// hold that many elements of at least minBytes each, so a forged count can
// never make the decoder allocate more than the message justifies.
func (r *reader) count(minBytes int) int {
	n := r.uvarint()
	if r.bad != nil {
		return 0
	}
	if n > uint64(r.remaining()/minBytes) {
		r.fail("count %d exceeds message", n)
		return 0
	}
	return int(n)
}

// end returns the sticky error. Bytes after the fields this build knows
// are fields a newer build appended: they are skipped, so that a message
// can grow without a new type. (Builds that announce no message types,
// v0.1.0 and earlier, refuse them as malformed: an appended field goes
// only to peers that announce their types.)
func (r *reader) end() error { return r.bad }

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}
