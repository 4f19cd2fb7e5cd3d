package health

import (
	"bytes"
	"slices"
	"strconv"
)

// vLLM's vllm:lora_requests_info is a gauge whose labels say the engine's
// LoRA state (max_lora, and the adapters running and waiting, each a
// comma-separated list) and whose value is when the engine set it, in
// seconds. Every change adds a series and the old ones stay on the page,
// so the engine's state is the series of the latest value; engines that
// stamp whole seconds (llm-d-inference-sim) leave several with the same
// value, and then the adapters of all of them were running within that
// second.
var metricLoRAInfo = []byte("vllm:lora_requests_info")

// Bounds on what one page's LoRA series may hold: an engine runs a few
// adapters at once, and a name is a model's name.
const (
	maxLoRANames    = 64
	maxLoRANameSize = 512
)

// loraReading is the latest vllm:lora_requests_info series of a page.
type loraReading struct {
	ok               bool
	stamp            float64 // the series' value
	maxLoRA          int
	running, waiting []string
}

// add takes one series of the family, line being its sample line.
func (l *loraReading) add(line []byte, stamp float64) {
	if l.ok && stamp < l.stamp {
		return
	}
	var s loraReading
	ok := eachLabel(line, func(name, value []byte) {
		switch string(name) {
		case "max_lora":
			s.maxLoRA, _ = strconv.Atoi(string(value))
		case "running_lora_adapters":
			s.running = appendNames(s.running, value)
		case "waiting_lora_adapters":
			s.waiting = appendNames(s.waiting, value)
		}
	})
	if !ok {
		return
	}
	if l.ok && stamp == l.stamp {
		s.running = union(l.running, s.running)
		s.waiting = union(l.waiting, s.waiting)
	}
	s.ok, s.stamp = true, stamp
	*l = s
}

// appendNames appends the names of a comma-separated list, within the
// bounds.
func appendNames(dst []string, list []byte) []string {
	for _, n := range bytes.Split(list, []byte(",")) {
		if n = bytes.TrimSpace(n); len(n) > 0 && len(n) <= maxLoRANameSize && len(dst) < maxLoRANames {
			dst = append(dst, string(n))
		}
	}
	return dst
}

// union is a's names and those of b it lacks, within maxLoRANames.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, n := range b {
		if !slices.Contains(out, n) && len(out) < maxLoRANames {
			out = append(out, n)
		}
	}
	return out
}

// eachLabel calls fn with each label of a sample line's label set,
// unescaped, and reports whether the set was well formed.
func eachLabel(line []byte, fn func(name, value []byte)) bool {
	open := bytes.IndexByte(line, '{')
	if open < 0 {
		return false
	}
	rest := line[open:]
	end := labelsEnd(rest)
	if end < 0 {
		return false
	}
	rest = rest[1:end]
	for len(rest) > 0 {
		eq := bytes.IndexByte(rest, '=')
		if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
			return false
		}
		name := bytes.TrimSpace(rest[:eq])
		value, n, ok := quoted(rest[eq+1:])
		if !ok {
			return false
		}
		fn(name, value)
		rest = bytes.TrimLeft(rest[eq+1+n:], ", ")
	}
	return true
}

// quoted reads the quoted value s starts with (the exposition format's
// escapes: \\, \", \n) and returns it, how many bytes of s it took, and
// whether it was closed.
func quoted(s []byte) ([]byte, int, bool) {
	var out []byte
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return out, i + 1, true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == 'n' {
				out = append(out, '\n')
			} else {
				out = append(out, s[i])
			}
		default:
			out = append(out, c)
		}
	}
	return nil, 0, false
}
