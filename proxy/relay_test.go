package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fakeworker"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

func sseChunk(data string) string {
	ev := "data: " + data + "\n\n"
	return fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)
}

// readChunk reads one chunk of a chunked body, as the client got it.
func readChunk(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
	if err != nil {
		t.Fatalf("chunk size line %q", line)
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(br, data); err != nil {
		t.Fatal(err)
	}
	return string(data[:size])
}

// TestEventsThatArriveTogetherGoOutInOneChunk: events the worker sent at
// once reach the client in one chunk (one write), and an event that came
// alone is relayed without waiting for the next one.
func TestEventsThatArriveTogetherGoOutInOneChunk(t *testing.T) {
	w := startFake(t, "w1")
	w.Set(func(e *fakeworker.Exchange) {
		if e.StartStream() != nil || e.Raw(sseChunk(`{"n":0}`)) != nil {
			return
		}
		if e.Raw(sseChunk(`{"n":1}`)+sseChunk(`{"n":2}`)+sseChunk(`{"n":3}`)) != nil || e.WaitHangUp() {
			return
		}
		if e.Raw(sseChunk(`{"n":4}`)) == nil {
			_ = e.EndStream()
		}
	})
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	defer conn.Close()
	tp := textproto.NewReader(br)
	if status, err := tp.ReadLine(); err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status %q, %v", status, err)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		t.Fatal(err)
	}
	if got := readChunk(t, br); got != "data: {\"n\":0}\n\n" {
		t.Fatalf("first chunk %q", got)
	}
	want := "data: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: {\"n\":3}\n\n"
	if got := readChunk(t, br); got != want { // read while the worker holds the rest
		t.Fatalf("second chunk %q, want the three events that arrived together", got)
	}
	w.Open()
	var rest strings.Builder
	for chunk := readChunk(t, br); chunk != ""; chunk = readChunk(t, br) {
		rest.WriteString(chunk)
	}
	if rest.String() != "data: {\"n\":4}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest %q", rest.String())
	}
}

func TestNextReadReadyOnlyForAChunkThatArrivedWhole(t *testing.T) {
	for _, tc := range []struct {
		buffered string
		framing  int
		ready    bool
	}{
		{"", -1, false},
		{"5\r\nhello\r\n", -1, true},
		{"5\r\nhello\r", -1, false},
		{"5\r\nhel", -1, false},
		{"5\r", -1, false},
		{"A\r\n0123456789\r\n", -1, true},
		{"5;ext=1\r\nhello\r\n", -1, false}, // not parsed: read on its own
		{"0\r\n\r\n", -1, true},
		{"0\r\n", -1, false},
		{"0\r\nTrailer: x\r\n\r\n", -1, false},
		{"anything", 12, true},
		{"anything", -2, true},
		{"", 12, false},
	} {
		br := bufio.NewReader(strings.NewReader(tc.buffered))
		_, _ = br.Peek(len(tc.buffered)) // fill the buffer
		if got := nextReadReady(br, tc.framing); got != tc.ready {
			t.Errorf("%q framing %d: ready %v, want %v", tc.buffered, tc.framing, got, tc.ready)
		}
	}
}

// streamPieces makes a worker that streams pieces, each as one chunk, and
// writes the next only once the client has read the last (ack): every piece
// is one read of the router's.
func streamPieces(t *testing.T, pieces []string, ack <-chan struct{}) fakeworker.Behaviour {
	return func(e *fakeworker.Exchange) {
		if e.StartStream() != nil {
			return
		}
		for _, p := range pieces {
			if e.Raw(fmt.Sprintf("%x\r\n%s\r\n", len(p), p)) != nil {
				return
			}
			select {
			case <-ack:
			case <-time.After(30 * time.Second):
				return
			}
		}
		_ = e.Raw("0\r\n\r\n")
	}
}

// relayPieces streams pieces through a router to a client that reads them
// one by one, and returns the tokens the router counted for the worker.
func relayPieces(t *testing.T, pieces []string) uint64 {
	t.Helper()
	w := startFake(t, "w1")
	ack := make(chan struct{})
	w.Set(streamPieces(t, pieces, ack))
	r := startRouter(t, Config{}, w)
	conn, br := rawPost(t, r.url, "/v1/completions", completion("x", true))
	defer conn.Close()
	tp := textproto.NewReader(br)
	if status, err := tp.ReadLine(); err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status %q, %v", status, err)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for range pieces {
		got.WriteString(readChunk(t, br))
		ack <- struct{}{}
	}
	if readChunk(t, br) != "" || got.String() != strings.Join(pieces, "") {
		t.Fatalf("the client got %q", got.String())
	}
	var tokens uint64
	testwait.Eventually(t, waitDeadline, func() bool {
		tokens = r.proxy.WorkerTallies()[1].Tokens
		return r.totalLoad() == 0 && tokens > 0
	}, "the stream to be counted")
	return tokens
}

// A data marker cut across the worker's writes is still one event.
func TestStreamTokensCountEventsAcrossReads(t *testing.T) {
	pieces := []string{"data: {\"t\":1}\n\nda", "ta: {\"t\":2}\n\nd", "ata: {\"t\":3}\n", "\ndata", ": {\"t\":4}\n\n", "data: [DONE]\n\n"}
	if got := relayPieces(t, pieces); got != 4 {
		t.Fatalf("counted %d tokens, want 4", got)
	}
}

// The engine's final usage chunk says how many tokens it generated, and
// that is what is counted, wherever it comes among the reads.
func TestStreamTokensComeFromTheFinalUsageChunk(t *testing.T) {
	pieces := []string{"data: {\"t\":1}\n\n", "data: {\"t\":2}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_t", "okens\":42,\"total_tokens\":47}}\n\n", "data: [DONE]\n\n"}
	if got := relayPieces(t, pieces); got != 42 {
		t.Fatalf("counted %d tokens, want the usage chunk's 42", got)
	}
}

func TestSSECountFindsEveryDataLine(t *testing.T) {
	stream := "data: a\n\nevent: x\ndata: b\n\n: comment data: no\n\ndata: c\r\n\r\ndata: [DONE]\n\n"
	for size := 1; size <= len(stream); size++ {
		var c sseCount
		n := 0
		for i := 0; i < len(stream); i += size {
			n += c.feed([]byte(stream[i:min(i+size, len(stream))]))
		}
		if n != 4 || c.n != 4 {
			t.Fatalf("reads of %d bytes: %d data lines (%d), want 4", size, n, c.n)
		}
	}
}
