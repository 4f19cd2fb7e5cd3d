package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// readEvents returns the data of every event in stream, and the error that ended it.
func readEvents(stream string, bufSize int) ([]string, error) {
	events := newSSEReader(bufio.NewReaderSize(strings.NewReader(stream), bufSize))
	var out []string
	for {
		data, err := events.next()
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
	}
}

func TestSSEReaderFollowsTheEventStreamFormat(t *testing.T) {
	stream := ": a comment\n" +
		"data: one\n\n" +
		"event: ping\nid: 7\nretry: 100\n\n" + // no data: not an event for us
		"data:two\r\n\r\n" + // no space after the colon, CRLF lines
		"data: line 1\ndata: line 2\n\n" + // multi-line data joins with a newline
		"\n\n" +
		"data\n\n" + // a field name alone is an empty data line
		"data: last without blank line"
	got, err := readEvents(stream, 16)
	want := []string{"one", "two", "line 1\nline 2", "", "last without blank line"}
	if err != io.EOF || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, %v; want %q, EOF", got, err, want)
	}
}

func TestSSEReaderReassemblesLinesLongerThanItsBuffer(t *testing.T) {
	long := strings.Repeat("x", 1000)
	got, err := readEvents("data: "+long+"\n\ndata: short\n\n", 16)
	if err != io.EOF || len(got) != 2 || got[0] != long || got[1] != "short" {
		t.Fatalf("events of lengths %d, %v", len(got), err)
	}
}

func TestSSEReaderRefusesAnEndlessEvent(t *testing.T) {
	long := strings.Repeat("y", maxEventBytes/2)
	_, err := readEvents("data: "+long+"\ndata: "+long+"\ndata: "+long+"\n\n", 4096)
	if !errors.Is(err, errEventTooLong) {
		t.Fatalf("err = %v, want errEventTooLong", err)
	}
	_, err = readEvents("data: "+strings.Repeat("z", maxEventBytes+10)+"\n\n", 4096)
	if !errors.Is(err, errEventTooLong) {
		t.Fatalf("one long line: err = %v, want errEventTooLong", err)
	}
}

func TestCompletionStreamReadsUsageAndDone(t *testing.T) {
	var s completionStream
	for _, event := range []string{
		`{"choices":[{"text":"a","finish_reason":null}],"usage":null}`,
		`{"choices":[{"text":"b","finish_reason":"error"}]}`, // "error" as a value, not a key
		`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":64}}}`,
		`[DONE]`,
	} {
		if err := s.onEvent([]byte(event)); err != nil {
			t.Fatalf("event %s: %v", event, err)
		}
	}
	if !s.done || s.events != 3 || s.usage == nil || *s.usage != (usage{100, 2, 64}) {
		t.Fatalf("done %v events %d usage %+v", s.done, s.events, s.usage)
	}
}

func TestCompletionStreamUsageWithoutDetailsHasNoCachedTokens(t *testing.T) {
	for _, event := range []string{
		`{"usage":{"prompt_tokens":10,"completion_tokens":1}}`,
		`{"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":null}}`,
	} {
		var s completionStream
		if err := s.onEvent([]byte(event)); err != nil || s.usage == nil || *s.usage != (usage{10, 1, 0}) {
			t.Fatalf("event %s: usage %+v, %v", event, s.usage, err)
		}
	}
}

func TestCompletionStreamRefusesBadUsageAndReportsErrors(t *testing.T) {
	for _, tc := range []struct {
		event string
		want  error
	}{
		{`{"usage":{"prompt_tokens":-1}}`, errBadUsage},
		{`{"usage":{"prompt_tokens":"ten"}}`, errBadUsage},
		{`{"usage":7}`, errBadUsage},
		{`{"usage":{`, errBadUsage},
		{`{"error":{"message":"boom"}}`, errStreamError},
		{`{"error":`, errStreamError},
	} {
		var s completionStream
		if err := s.onEvent([]byte(tc.event)); !errors.Is(err, tc.want) {
			t.Errorf("event %s: err %v, want %v", tc.event, err, tc.want)
		}
	}
}

func FuzzSSEStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[]}\n\ndata: {\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata\r\ndata: {\"error\":1}\n\n\n"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":1e99}}}\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		events := newSSEReader(bufio.NewReaderSize(strings.NewReader(string(stream)), 16))
		var s completionStream
		for range len(stream) + 1 { // every event consumes at least one byte
			data, err := events.next()
			if err != nil {
				return
			}
			if len(data) > len(stream) {
				t.Fatalf("event of %d bytes from a %d-byte stream", len(data), len(stream))
			}
			if err := s.onEvent(data); err == nil && s.usage != nil &&
				(s.usage.promptTokens < 0 || s.usage.cachedTokens < 0 || s.usage.completionTokens < 0) {
				t.Fatalf("negative usage accepted: %+v", *s.usage)
			}
		}
		t.Fatal("the reader did not reach the end of the stream")
	})
}
