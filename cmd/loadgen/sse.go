package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one server-sent event, so that a server that never ends a line cannot
// exhaust memory. Completion chunks are a few hundred bytes.
const maxEventBytes = 4 << 20

// errEventTooLong reports an event over maxEventBytes.
var errEventTooLong = errors.New("server-sent event too long")

// sseReader reads the data of server-sent events (the text/event-stream format) from a stream.
// It is not safe for concurrent use.
type sseReader struct {
	in   *bufio.Reader
	data []byte // the current event's data, reused between events
	line []byte // a line longer than the read buffer, reassembled
}

// newSSEReader reads events from in.
func newSSEReader(in *bufio.Reader) *sseReader {
	return &sseReader{in: in}
}

// next returns the data of the next event that has any: its "data" lines joined by newlines.
// Comments and other fields are skipped. The slice is valid until the following call. At the
// end of the stream it returns io.EOF, after delivering an event the stream ended without its
// blank line.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && hasData {
				return s.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.data, nil
			}
			continue
		}
		field, value := splitField(line)
		if string(field) != "data" {
			continue
		}
		if hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxEventBytes {
			return nil, errEventTooLong
		}
		s.data = append(s.data, value...)
		hasData = true
	}
}

// splitField splits an event-stream line into its field name and value (one leading space of
// the value dropped). A comment line (leading colon) has an empty field name.
func splitField(line []byte) (field, value []byte) {
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return line, nil
	}
	field, value = line[:colon], line[colon+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return field, value
}

// readLine returns the next line without its terminator (LF, CRLF or a lone CR before LF is not
// distinguished: a trailing CR is dropped). The slice is valid until the next read.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.in.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		line, err = s.readLongLine(line)
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}

// readLongLine reassembles a line longer than the read buffer, up to maxEventBytes.
func (s *sseReader) readLongLine(first []byte) ([]byte, error) {
	s.line = append(s.line[:0], first...)
	for {
		more, err := s.in.ReadSlice('\n')
		if len(s.line)+len(more) > maxEventBytes {
			return nil, fmt.Errorf("line: %w", errEventTooLong)
		}
		s.line = append(s.line, more...)
		if err != bufio.ErrBufferFull {
			return s.line, err
		}
	}
}
