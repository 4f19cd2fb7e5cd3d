package loadsync

import (
	"encoding/binary"
	"fmt"
)

// checkpointDepths calls fn with the indexes of hashes worth announcing for
// one routing decision, shallowest first: the sparse checkpoints 0, 1, 3,
// 7, ... (depths that are powers of two, counting from 1) and the deepest
// block, each once, with each one's span: how many blocks it stands for
// beyond the previous one (1 for index 0), so the spans add up to n. A chain
// of n blocks yields about log2(n)+1 facts, and a later turn of the same
// conversation repeats all of them but the deepest and any new checkpoint,
// which the recent set then filters out.
func checkpointDepths(n int, fn func(i, span int)) {
	if n == 0 {
		return
	}
	prev := -1
	for depth := 1; depth < n; depth <<= 1 {
		fn(depth-1, depth-1-prev)
		prev = depth - 1
	}
	fn(n-1, n-1-prev)
}

// appendFacts encodes a fact list (a digest or a full state) as header,
// count and entries of (worker uvarint, span uvarint, hash fixed 8 bytes).
func appendFacts(b []byte, typ byte, facts []Fact) []byte {
	return appendFactsBody(appendHeader(b, typ), facts)
}

func factBytes(f Fact) int { return uvarintLen(uint64(f.Worker)) + uvarintLen(uint64(f.Span)) + 8 }

// decodeFacts decodes a fact list of the given type, all or nothing.
func decodeFacts(msg []byte, want byte) ([]Fact, error) {
	typ, r, err := readHeader(msg)
	if err != nil {
		return nil, err
	}
	if typ != want {
		return nil, fmt.Errorf("%w: type %d, want %d", ErrUnexpectedMessage, typ, want)
	}
	return readFacts(&r)
}

func readFacts(r *reader) ([]Fact, error) {
	facts, err := readFactsBody(r)
	if err != nil {
		return nil, err
	}
	return facts, r.end()
}

func readFactsBody(r *reader) ([]Fact, error) {
	n := r.count(factMinBytes)
	if r.err() != nil {
		return nil, r.err()
	}
	facts := make([]Fact, 0, n)
	for range n {
		f := Fact{Worker: r.uint32v(), Span: r.uint32v(), Hash: r.fixed64()}
		if r.err() != nil {
			return nil, r.err()
		}
		facts = append(facts, f)
	}
	return facts, nil
}

// takeFacts takes facts from the front of queue for at most maxPackets
// digest packets of at most maxBytes each, in packet-sized runs. Facts that
// do not fit stay queued for the next call.
func takeFacts(queue *factRing, maxBytes, maxPackets int) [][]Fact {
	var runs [][]Fact
	budget := maxBytes - headerBytes - maxFactCountBytes
	for len(runs) < maxPackets && queue.len() > 0 {
		n, used := 0, 0
		for n < queue.len() && used+factBytes(queue.oldest(n)) <= budget {
			used += factBytes(queue.oldest(n))
			n++
		}
		runs = append(runs, queue.popOldest(nil, n))
	}
	return runs
}

// maxFactCountBytes bounds a fact list's count prefix: no packet holds
// 2^21 facts.
const maxFactCountBytes = 3

// digestPackets encodes runs of facts as msgDigest packets, one a run.
func digestPackets(runs [][]Fact) [][]byte {
	var pkts [][]byte
	for _, run := range runs {
		used := 0
		for _, f := range run {
			used += factBytes(f)
		}
		pkts = append(pkts, appendFacts(make([]byte, 0, headerBytes+maxFactCountBytes+used), msgDigest, run))
	}
	return pkts
}

// appendFactsBody encodes facts as a count and entries, as appendFacts
// lays them out after the header.
func appendFactsBody(b []byte, facts []Fact) []byte {
	b = binary.AppendUvarint(b, uint64(len(facts)))
	for _, f := range facts {
		b = binary.AppendUvarint(b, uint64(f.Worker))
		b = binary.AppendUvarint(b, uint64(f.Span))
		b = binary.LittleEndian.AppendUint64(b, f.Hash)
	}
	return b
}
