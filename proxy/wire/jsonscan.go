package wire

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A one-pass JSON scanner for request bodies: it validates a body and finds
// the spans of the few values the router reads, without building a
// document tree or copying the body, so reading a body costs about one
// look at each of its bytes (strings are skipped with bytes.IndexByte) and
// allocates nothing.
//
// It accepts exactly what valyala/fastjson's parser accepts (the router
// used it before, and the tests check the two agree): a superset of JSON
// that is lenient about string contents and the shape of numbers, so that
// the router refuses no body an engine would take. Strings are unescaped
// the way fastjson does it, best effort.

// maxJSONDepth bounds nesting, as fastjson's MaxDepth does: a body of a
// million '[' is refused, not recursed into.
const maxJSONDepth = 300

// errJSON is a syntax error at an offset of the body.
type errJSON struct {
	at  int
	msg string
}

func (e *errJSON) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.at) }

func syntaxErr(at int, msg string) error { return &errJSON{at: at, msg: msg} }

var errTooDeep = errors.New("too deeply nested")

// jsonSkipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func jsonSkipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonSkipValue validates the value that starts at b[i] (no whitespace
// before it) and returns the index just past it.
func jsonSkipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, syntaxErr(i, "a value is missing")
	}
	if depth++; depth > maxJSONDepth {
		return i, errTooDeep
	}
	switch b[i] {
	case '{':
		return jsonEachMember(b, i, depth, nil)
	case '[':
		return jsonEachElement(b, i, depth, nil)
	case '"':
		end, err := jsonStringEnd(b, i+1)
		return end + 1, err
	case 't':
		return jsonLiteral(b, i, "true")
	case 'f':
		return jsonLiteral(b, i, "false")
	case 'n':
		if bytes.HasPrefix(b[i:], []byte("null")) {
			return i + 4, nil
		}
		if len(b)-i >= 3 && bytes.EqualFold(b[i:i+3], []byte("nan")) {
			return i + 3, nil
		}
		return i, syntaxErr(i, "an unexpected value")
	}
	return jsonNumberEnd(b, i)
}

func jsonLiteral(b []byte, i int, word string) (int, error) {
	if !bytes.HasPrefix(b[i:], []byte(word)) {
		return i, syntaxErr(i, "an unexpected value")
	}
	return i + len(word), nil
}

// jsonNumberEnd returns the end of the number at b[i]: a run of digits,
// signs, dots and exponents, or inf or nan with an optional sign.
func jsonNumberEnd(b []byte, i int) (int, error) {
	j := i
	for j < len(b) && isNumberByte(b[j]) {
		j++
	}
	if j == len(b) || j > i+1 || j == i+1 && b[i] != '-' && b[i] != '+' {
		return j, nil
	}
	if len(b)-j >= 3 && (bytes.EqualFold(b[j:j+3], []byte("inf")) || bytes.EqualFold(b[j:j+3], []byte("nan"))) {
		return j + 3, nil
	}
	return i, syntaxErr(i, "an unexpected character")
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+'
}

// jsonStringEnd returns the index of the quote that closes the string whose
// contents start at b[i]: the first quote not escaped by an odd run of
// backslashes.
func jsonStringEnd(b []byte, i int) (int, error) {
	for {
		n := bytes.IndexByte(b[i:], '"')
		if n < 0 {
			return len(b), syntaxErr(len(b), "a string is not closed")
		}
		q := i + n
		k := q
		for k > i && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q, nil
		}
		i = q + 1
	}
}

// jsonEachMember validates the object at b[i], whose depth is depth, and
// returns the index just past it. For each member it calls member, unless
// it is nil, with the key (raw: still escaped) and the start of the value;
// member must read the value (jsonSkipValue at depth if nothing else) and
// return the index just past it.
func jsonEachMember(b []byte, i, depth int, member func(key []byte, vs int) (int, error)) (int, error) {
	i = jsonSkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		i = jsonSkipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return i, syntaxErr(i, "an object key is missing")
		}
		ke, err := jsonStringEnd(b, i+1)
		if err != nil {
			return ke, err
		}
		key := b[i+1 : ke]
		i = jsonSkipWS(b, ke+1)
		if i >= len(b) || b[i] != ':' {
			return i, syntaxErr(i, "a ':' is missing after an object key")
		}
		vs := jsonSkipWS(b, i+1)
		var ve int
		if member != nil {
			ve, err = member(key, vs)
		} else {
			ve, err = jsonSkipValue(b, vs, depth)
		}
		if err != nil {
			return ve, err
		}
		if i = jsonSkipWS(b, ve); i >= len(b) {
			return i, syntaxErr(i, "an object is not closed")
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "a ',' is missing after an object value")
		}
	}
}

// jsonEachElement validates the array at b[i], whose depth is depth, and
// returns the index just past it. For each element it calls element,
// unless it is nil, with the start of the value; element must read the
// value and return the index just past it.
func jsonEachElement(b []byte, i, depth int, element func(vs int) (int, error)) (int, error) {
	i = jsonSkipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		vs := jsonSkipWS(b, i)
		var ve int
		var err error
		if element != nil {
			ve, err = element(vs)
		} else {
			ve, err = jsonSkipValue(b, vs, depth)
		}
		if err != nil {
			return ve, err
		}
		if i = jsonSkipWS(b, ve); i >= len(b) {
			return i, syntaxErr(i, "an array is not closed")
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return i + 1, nil
		default:
			return i, syntaxErr(i, "a ',' is missing after an array value")
		}
	}
}

// jsonString reads the string value at b[vs], if it is one: its raw
// contents and the index just past it. ok is false for another value,
// which is validated and skipped.
func jsonString(b []byte, vs, depth int) (raw []byte, ve int, ok bool, err error) {
	if vs >= len(b) || b[vs] != '"' {
		ve, err = jsonSkipValue(b, vs, depth)
		return nil, ve, false, err
	}
	end, err := jsonStringEnd(b, vs+1)
	return b[vs+1 : end], end + 1, true, err
}

// jsonAppendUnescaped appends the contents of a raw string, unescaped best
// effort: an escape that is not valid JSON is kept as it is written.
func jsonAppendUnescaped(dst, raw []byte) []byte {
	for {
		n := bytes.IndexByte(raw, '\\')
		if n < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:n]...)
		if n == len(raw)-1 {
			return dst // a lone backslash at the end is dropped
		}
		var used int
		dst, used = appendEscape(dst, raw[n+1:])
		raw = raw[n+1+used:]
	}
}

// appendEscape appends what the escape after a backslash stands for, and
// reports how many bytes of s it used.
func appendEscape(dst, s []byte) ([]byte, int) {
	switch c := s[0]; c {
	case '"', '\\', '/':
		return append(dst, c), 1
	case 'b':
		return append(dst, '\b'), 1
	case 'f':
		return append(dst, '\f'), 1
	case 'n':
		return append(dst, '\n'), 1
	case 'r':
		return append(dst, '\r'), 1
	case 't':
		return append(dst, '\t'), 1
	case 'u':
		return appendUnicodeEscape(dst, s[1:])
	default:
		return append(dst, '\\', c), 1
	}
}

// appendUnicodeEscape appends the character of a \u escape whose hex digits
// start s (a surrogate pair takes two escapes), and reports how many bytes
// it used, the 'u' included.
func appendUnicodeEscape(dst, s []byte) ([]byte, int) {
	x, ok := hex4(s)
	if !ok {
		return append(dst, `\u`...), 1
	}
	if !utf16.IsSurrogate(x) {
		return utf8.AppendRune(dst, x), 5
	}
	if len(s) < 10 || s[4] != '\\' || s[5] != 'u' {
		return append(append(dst, `\u`...), s[:4]...), 5
	}
	y, ok := hex4(s[6:])
	if !ok {
		return append(append(dst, `\u`...), s[:4]...), 5
	}
	return utf8.AppendRune(dst, utf16.DecodeRune(x, y)), 11
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	x, err := strconv.ParseUint(string(s[:4]), 16, 16)
	return rune(x), err == nil
}

// jsonAppendCompact appends the value b[vs:ve] as fastjson writes a value it
// has not looked into: as written, less the whitespace between tokens.
func jsonAppendCompact(dst, b []byte, vs, ve int) []byte {
	for i := vs; i < ve; {
		switch c := b[i]; {
		case c == '"':
			end, _ := jsonStringEnd(b, i+1)
			dst = append(dst, b[i:end+1]...)
			i = end + 1
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			i++
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}

// jsonCompactValue validates the value at b[i] (no whitespace before it),
// at depth depth, as jsonSkipValue does, and appends it to dst as
// jsonAppendCompact would: one walk where those two take two. It returns
// dst and the index just past the value.
func jsonCompactValue(dst, b []byte, i, depth int) ([]byte, int, error) {
	if i >= len(b) || b[i] != '{' && b[i] != '[' {
		end, err := jsonSkipValue(b, i, depth)
		if err == nil {
			dst = append(dst, b[i:end]...)
		}
		return dst, end, err
	}
	if depth++; depth > maxJSONDepth {
		return dst, i, errTooDeep
	}
	open := b[i]
	dst = append(dst, open)
	n := 0
	value := func(vs int) (int, error) {
		var ve int
		var err error
		dst, ve, err = jsonCompactValue(dst, b, vs, depth)
		return ve, err
	}
	var end int
	var err error
	if open == '{' {
		end, err = jsonEachMember(b, i, depth, func(key []byte, vs int) (int, error) {
			if n++; n > 1 {
				dst = append(dst, ',')
			}
			dst = append(append(append(dst, '"'), key...), '"', ':')
			return value(vs)
		})
		return append(dst, '}'), end, err
	}
	end, err = jsonEachElement(b, i, depth, func(vs int) (int, error) {
		if n++; n > 1 {
			dst = append(dst, ',')
		}
		return value(vs)
	})
	return append(dst, ']'), end, err
}
