package workload

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadTraceReadsRecordsInFileOrder(t *testing.T) {
	input := `{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}

{"timestamp": 1500, "input_length": 512, "output_length": 0, "hash_ids": [0], "extra": "ignored"}
{"timestamp": 2.5, "input_length": 1, "output_length": 3, "hash_ids": [7]}
`
	got, err := LoadTrace(strings.NewReader(input), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceRecord{
		{Timestamp: 0, InputLength: 600, OutputLength: 20, HashIDs: []int64{0, 1}},
		{Timestamp: 1500 * time.Millisecond, InputLength: 512, OutputLength: 0, HashIDs: []int64{0}},
		{Timestamp: 2500 * time.Microsecond, InputLength: 1, OutputLength: 3, HashIDs: []int64{7}},
	}
	if !slices.EqualFunc(got, want, recordsEqual) {
		t.Fatalf("LoadTrace = %+v, want %+v", got, want)
	}
}

func recordsEqual(a, b TraceRecord) bool {
	return a.Timestamp == b.Timestamp && a.InputLength == b.InputLength &&
		a.OutputLength == b.OutputLength && slices.Equal(a.HashIDs, b.HashIDs)
}

func TestLoadTraceStopsAtLimit(t *testing.T) {
	line := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}` + "\n"
	// The line after the limit is broken: it must not even be read.
	got, err := LoadTrace(strings.NewReader(line+line+"{broken\n"), 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("LoadTrace(limit 2) = %d records, %v; want 2, nil", len(got), err)
	}
}

func TestLoadTraceNamesTheBadLine(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}`
	for _, tc := range []struct {
		name, line, mention string
	}{
		{"not json", `{"timestamp": 0,`, "bad trace record"},
		{"not an object", `[1, 2]`, "want a JSON object"},
		{"missing timestamp", `{"input_length": 10, "output_length": 1, "hash_ids": [1]}`, "missing timestamp"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]}`, "timestamp"},
		{"string length", `{"timestamp": 0, "input_length": "10", "output_length": 1, "hash_ids": [1]}`, "input_length"},
		{"fractional length", `{"timestamp": 0, "input_length": 10.5, "output_length": 1, "hash_ids": [1]}`, "input_length"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, "input_length"},
		{"huge input", `{"timestamp": 0, "input_length": 99999999999, "output_length": 1, "hash_ids": [1]}`, "input_length"},
		{"negative output", `{"timestamp": 0, "input_length": 10, "output_length": -1, "hash_ids": [1]}`, "output_length"},
		{"missing hash ids", `{"timestamp": 0, "input_length": 10, "output_length": 1}`, "missing hash_ids"},
		{"hash ids not array", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 1}`, "hash_ids"},
		{"too few hash ids", `{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1]}`, "1 ids for input_length 1000, want 2"},
		{"negative hash id", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-4]}`, "hash_ids[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadTrace(strings.NewReader(good+"\n\n"+tc.line+"\n"+good+"\n"), 0)
			var lineErr *LineError
			if !errors.As(err, &lineErr) || lineErr.Line != 3 {
				t.Fatalf("err = %v, want a *LineError for line 3", err)
			}
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("err = %v, want it to wrap ErrBadRecord", err)
			}
			if !strings.Contains(err.Error(), "trace line 3") || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %q, want it to name line 3 and mention %q", err, tc.mention)
			}
		})
	}
}

func TestLoadTraceRefusesAnOverlongLine(t *testing.T) {
	long := strings.Repeat(" ", maxLineBytes+1)
	_, err := LoadTrace(strings.NewReader("\n"+long+"\n"), 0)
	var lineErr *LineError
	if !errors.As(err, &lineErr) || lineErr.Line != 2 {
		t.Fatalf("err = %v, want a *LineError for line 2", err)
	}
}

func FuzzLoadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}`))
	f.Add([]byte(`{"timestamp": 1e300, "input_length": 1, "output_length": 0, "hash_ids": [0]}` + "\n\n{}"))
	f.Add([]byte(`{"timestamp": 3.25, "input_length": 1025, "output_length": 1, "hash_ids": [5, 6, 9223372036854775807]}`))
	f.Add([]byte("[]\n{\"hash_ids\": [1e400]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		records, err := LoadTrace(strings.NewReader(string(data)), 0)
		if err != nil {
			var lineErr *LineError
			if !errors.As(err, &lineErr) || lineErr.Line < 1 {
				t.Fatalf("error %v does not name a line", err)
			}
			return
		}
		for _, rec := range records {
			if rec.Timestamp < 0 || rec.InputLength < 1 || rec.InputLength > MaxInputTokens || rec.OutputLength < 0 {
				t.Fatalf("accepted an invalid record %+v", rec)
			}
			if len(rec.HashIDs) != (rec.InputLength+BlockTokens-1)/BlockTokens {
				t.Fatalf("accepted %d ids for input_length %d", len(rec.HashIDs), rec.InputLength)
			}
			if rec.InputLength <= 4*BlockTokens && len(PromptFor(rec)) != rec.InputLength*TokenBytes {
				t.Fatalf("prompt of %+v has the wrong length", rec)
			}
		}
	})
}

// sharedTrace returns the path of a trace in the shared data folder, which sits next to the
// repository root (the folder holding go.mod), or skips the test when it is absent.
func sharedTrace(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("repository root not found")
		}
		dir = parent
	}
	path := filepath.Join(dir, "..", "shared", "data", "traces", name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not available: %v", err)
	}
	return path
}

func loadSharedTrace(t testing.TB, name string, limit int) []TraceRecord {
	file, err := os.Open(sharedTrace(t, name))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	records, err := LoadTrace(file, limit)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

func BenchmarkLoadTraceConversation(b *testing.B) {
	for b.Loop() {
		loadSharedTrace(b, "mooncake_conversation_trace.jsonl", 0)
	}
}

func TestSpreadArrivalsMovesEachRecordWithinItsStepAndKeepsArrivalOrder(t *testing.T) {
	const step = 3 * time.Second
	var recs []TraceRecord
	for i := range 40 {
		recs = append(recs, TraceRecord{Timestamp: time.Duration(i/10) * step, InputLength: i + 1})
	}
	got := SpreadArrivals(recs, step, 7)
	if len(got) != len(recs) {
		t.Fatalf("%d records out of %d", len(got), len(recs))
	}
	distinct := map[time.Duration]bool{}
	for i, r := range got {
		orig := recs[r.InputLength-1].Timestamp
		if r.Timestamp < orig || r.Timestamp >= orig+step {
			t.Fatalf("record %d moved from %v to %v, outside [%v, %v)", r.InputLength-1, orig, r.Timestamp, orig, orig+step)
		}
		if i > 0 && r.Timestamp < got[i-1].Timestamp {
			t.Fatalf("arrival %d at %v comes before the one ahead of it at %v", i, r.Timestamp, got[i-1].Timestamp)
		}
		distinct[r.Timestamp] = true
	}
	if len(distinct) < 35 {
		t.Fatalf("%d distinct arrivals of 40: the steps' requests still arrive together", len(distinct))
	}
	if again := SpreadArrivals(recs, step, 7); !slices.EqualFunc(got, again, func(a, b TraceRecord) bool { return a.Timestamp == b.Timestamp && a.InputLength == b.InputLength }) {
		t.Fatal("the same seed spread the records differently")
	}
	if recs[0].Timestamp != 0 || recs[10].Timestamp != step {
		t.Fatal("SpreadArrivals changed its input")
	}
	if same := SpreadArrivals(recs, 0, 7); same[5].Timestamp != recs[5].Timestamp {
		t.Fatal("a spread of 0 moved a record")
	}
}
