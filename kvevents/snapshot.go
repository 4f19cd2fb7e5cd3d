package kvevents

import (
	"encoding/binary"
	"fmt"
)

// The snapshot wire: what a replica answers a peer that asks for its views
// of some workers (a replica that starts, or one that missed a relayed
// batch). Per worker: its id, the stream's epoch and next sequence, the
// block size, the names (8 bytes each) and the keys (4 bytes each), about
// 12 bytes a block in all.

// AppendSnapshots appends the encoding of snaps.
func AppendSnapshots(b []byte, snaps map[uint32]Snapshot) []byte {
	b = binary.AppendUvarint(b, uint64(len(snaps)))
	for id, s := range snaps {
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendUvarint(b, uint64(s.Epoch))
		b = binary.AppendUvarint(b, s.Next)
		b = binary.AppendUvarint(b, uint64(s.BlockSize))
		b = binary.AppendUvarint(b, uint64(len(s.Names)))
		for _, n := range s.Names {
			b = binary.LittleEndian.AppendUint64(b, n)
		}
		b = binary.AppendUvarint(b, uint64(len(s.Keys)))
		for _, k := range s.Keys {
			b = binary.LittleEndian.AppendUint32(b, uint32(k))
		}
	}
	return b
}

// DecodeSnapshots reads snapshots, refusing more than maxWorkers of them
// or one of more than maxBlocks names or keys, before anything is
// allocated for them.
func DecodeSnapshots(b []byte, maxWorkers, maxBlocks int) (map[uint32]Snapshot, error) {
	r := relayReader{b: b}
	n := r.uvarint()
	if n > uint64(maxWorkers) {
		return nil, fmt.Errorf("%w: %d snapshots", ErrRelay, n)
	}
	out := make(map[uint32]Snapshot, n)
	for range n {
		id := r.u32()
		s := Snapshot{Epoch: r.u32(), Next: r.uvarint(), BlockSize: int(r.u32())}
		s.Names = readFixed(&r, maxBlocks, 8, func(b []byte) uint64 { return binary.LittleEndian.Uint64(b) })
		s.Keys = readFixed(&r, maxBlocks, 4, func(b []byte) Key { return Key(binary.LittleEndian.Uint32(b)) })
		if r.err != nil {
			return nil, r.err
		}
		out[id] = s
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes after the snapshots", len(r.b))
	}
	return out, r.err
}

// readFixed reads a count (at most most) and that many values of size
// bytes each.
func readFixed[T any](r *relayReader, most, size int, read func([]byte) T) []T {
	n := r.uvarint()
	if n > uint64(most) || n*uint64(size) > uint64(len(r.b)) {
		r.fail("%d entries", n)
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = read(r.b[:size])
		r.b = r.b[size:]
	}
	return out
}
