package affinity

import "github.com/zeebo/xxh3"

// Text is a routing text held in pieces, read in order as one text. The
// proxy renders the small parts of a prompt (a message's role, the newlines
// between messages, a string with escapes) and leaves a long string without
// escapes where it lies in the request's body: a 64 KiB prompt is then not
// copied only to be hashed. Its hashes are those of the text the pieces make
// together, bit for bit, wherever the pieces are cut.
type Text [][]byte

// Len is the text's length in bytes.
func (t Text) Len() int {
	n := 0
	for _, p := range t {
		n += len(p)
	}
	return n
}

// AppendTo appends the text to dst, in one piece.
func (t Text) AppendTo(dst []byte) []byte {
	for _, p := range t {
		dst = append(dst, p...)
	}
	return dst
}

// maxStagedBlock is the largest block staged on the stack when it spans
// pieces; a larger --block-size stages it on the heap.
const maxStagedBlock = 1024

// blockHashes appends to dst the chained hashes of the first n full blocks
// of t, the chain seeded by h. A block within one piece is hashed where it
// lies; one across pieces is copied together first.
func (t Text) blockHashes(dst []uint64, h uint64, blockSize, n int) []uint64 {
	var buf [maxStagedBlock]byte
	var stage []byte
	staged := 0
	for _, p := range t {
		for len(p) > 0 && n > 0 {
			if staged == 0 && len(p) >= blockSize {
				h = xxh3.HashSeed(p[:blockSize], h)
				dst, p, n = append(dst, h), p[blockSize:], n-1
				continue
			}
			if stage == nil {
				stage = stageOf(&buf, blockSize)
			}
			c := copy(stage[staged:], p)
			staged, p = staged+c, p[c:]
			if staged == blockSize {
				h = xxh3.HashSeed(stage, h)
				dst, staged, n = append(dst, h), 0, n-1
			}
		}
	}
	return dst
}

// stageOf is n bytes of buf, or of the heap when buf is too small.
func stageOf(buf *[maxStagedBlock]byte, n int) []byte {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]byte, n)
}

// hashFrom is xxh3.HashSeed of t's bytes from offset off to its end, hashed
// where they lie when they are in one piece.
func (t Text) hashFrom(off int, seed uint64) uint64 {
	for i, p := range t {
		if off >= len(p) {
			off -= len(p)
			continue
		}
		if rest := t[i+1:]; rest.Len() > 0 {
			var buf [maxStagedBlock]byte
			return xxh3.HashSeed(rest.AppendTo(append(buf[:0], p[off:]...)), seed)
		}
		return xxh3.HashSeed(p[off:], seed)
	}
	return xxh3.HashSeed(nil, seed)
}
