package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The relay: what a replica that hears an engine tells its peers, so that
// every replica holds every engine's set whichever replica the engine
// publishes to. A packet carries records of two kinds:
//
//   - a batch: the changes one engine batch made to the worker's set (Op),
//     at the stream's position (epoch, sequence), in as many parts as the
//     packet size needs; a peer applies them in order and holds the same
//     set, block for block.
//   - a heartbeat: the worker's position, every RelayHeartbeat, from the
//     replica that hears it: peers know someone hears the engine, and a
//     peer behind it has missed a batch and fetches a snapshot.
//
// Each packet starts with the relaying replica's name, which a peer that
// misses a batch asks for a snapshot, and the block size and bound of its
// sets: a peer that keys or bounds them otherwise would not hold the same
// sets from the same changes, and drops the packet (RelayStats.Mismatched). Sizes: 9 bytes a stored block, 5 a
// removed one, plus about 10 a batch record (worker, epoch, sequence,
// part).

// RelayType is the first byte of a relay packet (a gossip message type of
// its own), RelayVersion the second.
const (
	RelayType    byte = 11
	RelayVersion byte = 1
)

const (
	recBatch     byte = 1
	recHeartbeat byte = 2
	// MaxRelayPacket bounds a relay packet, as the gossip's other packets.
	MaxRelayPacket = 60_000
	// maxOpsPerRecord bounds what a decoder allocates for one record before
	// reading its ops (a store takes 9 bytes of the packet).
	maxOpsPerRecord = MaxRelayPacket / 5
)

// ErrRelay wraps every refusal of a relay packet.
var ErrRelay = errors.New("kvevents: malformed relay packet")

// RelayedBatch is a batch record: part Part of the changes of one engine
// batch to worker Worker's set; More says more parts follow.
type RelayedBatch struct {
	Worker uint32
	Applied
	Part uint32
	More bool
}

// Heartbeat is a heartbeat record: the relaying replica hears worker Worker
// at (Epoch, Next); Started is false while it has heard no batch of it yet
// (connected, the engine silent so far).
type Heartbeat struct {
	Worker  uint32
	Epoch   uint32
	Next    uint64
	Started bool
}

// maxOriginBytes bounds the name a packet starts with.
const maxOriginBytes = 128

// relayWriter packs records into packets of at most MaxRelayPacket bytes,
// each starting with origin's name and the sets' geometry.
type relayWriter struct {
	origin  string
	geo     geometry
	packets [][]byte
	cur     []byte
	head    int // the header's length in cur
}

func (w *relayWriter) room(n int) {
	if len(w.cur)+n > MaxRelayPacket {
		w.flush()
	}
	if w.cur == nil {
		w.cur = append(make([]byte, 0, 1500), RelayType, RelayVersion)
		w.cur = binary.AppendUvarint(w.cur, uint64(len(w.origin)))
		w.cur = append(w.cur, w.origin...)
		w.cur = binary.AppendUvarint(w.cur, uint64(w.geo.blockSize))
		w.cur = binary.AppendUvarint(w.cur, uint64(w.geo.maxBlocks))
		w.head = len(w.cur)
	}
}

func (w *relayWriter) flush() {
	if len(w.cur) > w.head {
		w.packets = append(w.packets, w.cur)
	}
	w.cur = nil
}

// heartbeat appends a heartbeat record.
func (w *relayWriter) heartbeat(h Heartbeat) {
	w.room(2 + 3*binary.MaxVarintLen64)
	w.cur = append(w.cur, recHeartbeat)
	w.cur = binary.AppendUvarint(w.cur, uint64(h.Worker))
	w.cur = binary.AppendUvarint(w.cur, uint64(h.Epoch))
	w.cur = binary.AppendUvarint(w.cur, h.Next)
	w.cur = append(w.cur, flags(h.Started, false))
}

// batchHeader is the most a batch record's header takes.
const batchHeader = 1 + 4*binary.MaxVarintLen64 + 1 + binary.MaxVarintLen32

// batch appends the records of one applied batch of worker's, split into
// parts where a packet cannot hold it.
func (w *relayWriter) batch(worker uint32, a Applied) {
	ops, part := a.Ops, uint32(0)
	for {
		w.room(batchHeader + 9)
		n := fitOps(ops, MaxRelayPacket-len(w.cur)-batchHeader)
		more := n < len(ops)
		w.cur = append(w.cur, recBatch)
		w.cur = binary.AppendUvarint(w.cur, uint64(worker))
		w.cur = binary.AppendUvarint(w.cur, uint64(a.Epoch))
		w.cur = binary.AppendUvarint(w.cur, a.Seq)
		w.cur = binary.AppendUvarint(w.cur, uint64(part))
		w.cur = append(w.cur, flags(a.Fresh && part == 0, more))
		w.cur = binary.AppendUvarint(w.cur, uint64(n))
		for _, op := range ops[:n] {
			w.cur = appendOp(w.cur, op)
		}
		if !more {
			return
		}
		ops, part = ops[n:], part+1
		w.flush()
	}
}

// fitOps is how many of ops fit in room bytes.
func fitOps(ops []Op, room int) int {
	for i, op := range ops {
		if room -= opBytes(op); room < 0 {
			return i
		}
	}
	return len(ops)
}

func opBytes(op Op) int {
	switch op.Kind {
	case OpStore:
		return 9
	case OpRemove:
		return 5
	}
	return 1
}

func appendOp(b []byte, op Op) []byte {
	b = append(b, byte(op.Kind))
	switch op.Kind {
	case OpStore:
		b = binary.LittleEndian.AppendUint32(b, op.FP)
		b = binary.LittleEndian.AppendUint32(b, uint32(op.Key))
	case OpRemove:
		b = binary.LittleEndian.AppendUint32(b, op.FP)
	}
	return b
}

func flags(fresh, more bool) byte {
	var f byte
	if fresh {
		f |= 1
	}
	if more {
		f |= 2
	}
	return f
}

// geometry is how a replica keys and bounds its sets.
type geometry struct{ blockSize, maxBlocks int }

// ErrGeometry says a relay packet comes from a replica whose sets are of
// another block size or bound.
var ErrGeometry = errors.New("kvevents: relay from sets of another block size or bound")

// DecodeRelay reads a relay packet, handing each record, with the name of
// the replica that relays it, to onBatch or onHeartbeat in order. Nothing
// is handed on from a packet that does not decode whole, or whose sets'
// geometry is not geo (ErrGeometry).
func DecodeRelay(pkt []byte, geo geometry, onBatch func(string, RelayedBatch), onHeartbeat func(string, Heartbeat)) error {
	if len(pkt) > MaxRelayPacket {
		return fmt.Errorf("%w: %d bytes", ErrRelay, len(pkt))
	}
	if len(pkt) < 2 || pkt[0] != RelayType {
		return fmt.Errorf("%w: not a relay packet", ErrRelay)
	}
	if pkt[1] != RelayVersion {
		return fmt.Errorf("%w: version %d, not %d", ErrRelay, pkt[1], RelayVersion)
	}
	var batches []RelayedBatch
	var beats []Heartbeat
	r := relayReader{b: pkt[2:]}
	origin := r.origin()
	if got := (geometry{int(r.u32()), int(r.u32())}); r.err == nil && got != geo {
		return fmt.Errorf("%w: %d-token blocks, at most %d, not %d and %d", ErrGeometry, got.blockSize, got.maxBlocks,
			geo.blockSize, geo.maxBlocks)
	}
	for r.err == nil && len(r.b) > 0 {
		switch kind := r.byte(); kind {
		case recBatch:
			batches = append(batches, r.batch())
		case recHeartbeat:
			h := Heartbeat{Worker: r.u32(), Epoch: r.u32(), Next: r.uvarint()}
			if f := r.byte(); f&^1 != 0 {
				r.fail("heartbeat flags %#x", f)
			} else {
				h.Started = f == 1
			}
			beats = append(beats, h)
		default:
			r.fail("record kind %d", kind)
		}
	}
	if r.err != nil {
		return r.err
	}
	for _, b := range batches {
		onBatch(origin, b)
	}
	for _, h := range beats {
		onHeartbeat(origin, h)
	}
	return nil
}

// relayReader decodes with every read bounds-checked; the first failure
// sticks.
type relayReader struct {
	b   []byte
	err error
}

func (r *relayReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrRelay}, args...)...)
	}
	r.b = nil
}

func (r *relayReader) byte() byte {
	if len(r.b) < 1 {
		r.fail("cut short")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *relayReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *relayReader) u32() uint32 {
	v := r.uvarint()
	if v > 1<<32-1 {
		r.fail("%d over 32 bits", v)
	}
	return uint32(v)
}

func (r *relayReader) origin() string {
	n := r.uvarint()
	if n > maxOriginBytes || n > uint64(len(r.b)) {
		r.fail("an origin of %d bytes", n)
		return ""
	}
	o := string(r.b[:n])
	r.b = r.b[n:]
	return o
}

func (r *relayReader) fixed32() uint32 {
	if len(r.b) < 4 {
		r.fail("cut short")
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *relayReader) batch() RelayedBatch {
	b := RelayedBatch{Worker: r.u32()}
	b.Epoch, b.Seq, b.Part = r.u32(), r.uvarint(), r.u32()
	f := r.byte()
	if f&^3 != 0 {
		r.fail("batch flags %#x", f)
	}
	b.Fresh, b.More = f&1 != 0, f&2 != 0
	n := r.uvarint()
	if n > maxOpsPerRecord || n > uint64(len(r.b)) {
		r.fail("%d ops", n)
		return b
	}
	b.Ops = make([]Op, 0, n)
	for range n {
		b.Ops = append(b.Ops, r.op())
	}
	return b
}

func (r *relayReader) op() Op {
	op := Op{Kind: OpKind(r.byte())}
	switch op.Kind {
	case OpStore:
		op.FP, op.Key = r.fixed32(), Key(r.fixed32())
		if op.FP == 0 || op.Key == 0 {
			r.fail("a store of a zero fingerprint")
		}
	case OpRemove:
		op.FP = r.fixed32()
	case OpReset:
	default:
		r.fail("op kind %d", op.Kind)
	}
	return op
}
