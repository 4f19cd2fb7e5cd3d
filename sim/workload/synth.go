package workload

// vocabulary is the word list synthesised text is drawn from: 64 words, so one 64-bit random
// draw picks ten of them. Short common words keep the text near TokenBytes bytes per token.
var vocabulary = [64]string{
	"the", "of", "and", "to", "in", "is", "that", "for",
	"it", "as", "with", "on", "be", "at", "by", "this",
	"from", "or", "an", "are", "not", "we", "can", "all",
	"model", "cache", "token", "route", "load", "worker", "query", "state",
	"prefix", "block", "batch", "queue", "time", "step", "node", "graph",
	"value", "index", "table", "field", "error", "retry", "agent", "tool",
	"call", "file", "line", "test", "build", "patch", "diff", "read",
	"write", "open", "close", "shell", "output", "input", "result", "plan",
}

const hexDigits = "0123456789abcdef"

// mix64 is the splitmix64 finaliser: a bijection on uint64 that spreads every input bit over
// the whole output, used to turn small ids into unrelated-looking keys.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// splitmix is the splitmix64 generator: tiny state, good enough statistics for filler text.
type splitmix struct{ state uint64 }

func (s *splitmix) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	return mix64(s.state)
}

// appendText appends exactly n bytes of text determined by key: the key in 16 hexadecimal digits
// (distinct keys part there), then space-separated words drawn from a generator seeded by key,
// the last word cut at n.
func appendText(dst []byte, key uint64, n int) []byte {
	end := len(dst) + n
	for shift := 60; shift >= 0 && len(dst) < end; shift -= 4 {
		dst = append(dst, hexDigits[(key>>uint(shift))&0xf])
	}
	words := splitmix{state: key}
	for len(dst) < end {
		draw := words.next()
		for i := 0; i < 10 && len(dst) < end; i++ {
			dst = append(dst, ' ')
			dst = append(dst, vocabulary[draw&63]...)
			draw >>= 6
		}
	}
	return dst[:end]
}
