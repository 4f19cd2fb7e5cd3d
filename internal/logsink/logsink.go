// Package logsink is a destination for what a program under test writes while the test reads
// it: the text so far, or the lines a JSON slog handler logged with a given message, decoded.
package logsink

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Sink is an io.Writer that keeps every line written to it; safe for concurrent use.
type Sink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Messages are the JSON lines logged with msg, decoded; a line that is not JSON fails t.
func (s *Sink) Messages(t testing.TB, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
