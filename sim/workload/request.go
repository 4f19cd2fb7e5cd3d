package workload

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// Request is one completion request of a workload, as both the load generator and the simulator
// see it.
type Request struct {
	// Model is the requested model name; empty leaves "model" out of the body (the server's
	// default model).
	Model string
	// Prompt is the prompt text. Workload generators may share its bytes between requests:
	// treat it as read-only.
	Prompt []byte
	// MaxTokens is the number of tokens to generate (max_tokens).
	MaxTokens int
	// Pieces, when set, are where the pieces of an agentic conversation end in Prompt, in order:
	// the system prompt, the task, then each turn's answer and the tool's output after it (see
	// Agentic), so that a client can send the conversation as messages, tool calls and tool
	// results. Read-only.
	Pieces []int
}

// OpenAIBody renders r as the JSON body of an OpenAI /v1/completions request. With stream it asks
// for server-sent events and a final usage chunk (stream_options.include_usage). Strings are
// JSON-escaped; bytes that are not valid UTF-8 become U+FFFD, one per byte, as encoding/json does.
func (r Request) OpenAIBody(stream bool) []byte {
	body := make([]byte, 0, len(r.Prompt)+len(r.Model)+128)
	body = append(body, '{')
	if r.Model != "" {
		body = append(body, `"model":`...)
		body = appendJSONString(body, []byte(r.Model))
		body = append(body, ',')
	}
	body = append(body, `"prompt":`...)
	body = appendJSONString(body, r.Prompt)
	body = append(body, `,"max_tokens":`...)
	body = strconv.AppendInt(body, int64(r.MaxTokens), 10)
	if stream {
		body = append(body, `,"stream":true,"stream_options":{"include_usage":true}}`...)
	} else {
		body = append(body, `,"stream":false}`...)
	}
	return body
}

// jsonSafe marks the ASCII bytes that go into a JSON string as they are.
var jsonSafe = func() (safe [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		safe[c] = c != '"' && c != '\\'
	}
	return safe
}()

// appendJSONString appends s as a quoted JSON string. Runs of safe bytes are found eight at a
// time and copied at once, which keeps the common case (plain ASCII prompts of hundreds of
// kilobytes) near memmove speed.
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plainASCII8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf && jsonSafe[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRune(s[i:]); r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		dst = append(dst, s[start:i]...)
		dst = appendEscaped(dst, c)
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Bit patterns for plainASCII8, one byte repeated eight times.
const (
	ones      = 0x0101010101010101
	highBits  = 0x8080808080808080
	quotes    = '"' * ones
	backslash = '\\' * ones
)

// plainASCII8 reports whether the eight bytes packed in x are all printable ASCII other than a
// quote or a backslash (the classic "has a zero byte" bit trick, applied three times).
func plainASCII8(x uint64) bool {
	control := (x - 0x20*ones) & ^x
	quote := ((x ^ quotes) - ones) & ^(x ^ quotes)
	slash := ((x ^ backslash) - ones) & ^(x ^ backslash)
	return (x|control|quote|slash)&highBits == 0
}

// appendEscaped appends the escape of one byte that cannot appear in a JSON string as is: a
// quote, a backslash, a control character, or a byte of invalid UTF-8.
func appendEscaped(dst []byte, c byte) []byte {
	switch {
	case c == '"' || c == '\\':
		return append(dst, '\\', c)
	case c == '\n':
		return append(dst, '\\', 'n')
	case c == '\r':
		return append(dst, '\\', 'r')
	case c == '\t':
		return append(dst, '\\', 't')
	case c < 0x20:
		return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
	default:
		return append(dst, `\ufffd`...)
	}
}
