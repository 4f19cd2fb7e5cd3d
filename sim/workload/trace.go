package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/valyala/fastjson"
)

// ErrBadRecord marks a trace line that is not a valid record. LoadTrace wraps it in a *LineError
// that names the line.
var ErrBadRecord = errors.New("bad trace record")

// Bounds on what LoadTrace accepts, so that a hostile or corrupt trace cannot make the
// synthesised prompts exhaust memory.
const (
	// MaxInputTokens is the largest input_length accepted: 16 Mi tokens, a 64 MiB prompt.
	MaxInputTokens = 1 << 24
	// maxLineBytes is the longest line accepted; a record at MaxInputTokens needs about 300 KiB.
	maxLineBytes = 16 << 20
	// maxTimestampMS keeps timestamps within what a time.Duration holds (about 292 years).
	maxTimestampMS = math.MaxInt64 / int64(time.Millisecond)
)

// TraceRecord is one request of a Mooncake-format trace.
type TraceRecord struct {
	// Timestamp is the arrival time as an offset from the start of the trace
	// (JSON "timestamp", in milliseconds).
	Timestamp time.Duration
	// InputLength is the prompt length in tokens (JSON "input_length").
	InputLength int
	// OutputLength is the number of generated tokens (JSON "output_length").
	OutputLength int
	// HashIDs names the prompt's blocks of BlockTokens tokens, in order (JSON "hash_ids"); two
	// records that share their first k ids share their first k blocks. Its length is
	// ceil(InputLength / BlockTokens).
	HashIDs []int64
}

// Request returns the request that replays rec with the given model: the synthesised prompt
// (seed 0) and OutputLength as max_tokens (at least 1).
func (rec TraceRecord) Request(model string) Request {
	return Request{Model: model, Prompt: PromptFor(rec), MaxTokens: max(rec.OutputLength, 1)}
}

// LineError reports a trace line that could not be loaded.
type LineError struct {
	Line int   // 1-based line number
	Err  error // what is wrong; wraps ErrBadRecord for invalid content
}

func (e *LineError) Error() string { return fmt.Sprintf("trace line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// LoadTrace reads a JSONL trace, one record per line, blank lines skipped, unknown fields
// ignored, records kept in file order. limit > 0 stops after that many records; limit <= 0 reads
// all. An invalid line fails the whole load with a *LineError naming it.
func LoadTrace(r io.Reader, limit int) ([]TraceRecord, error) {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var parser fastjson.Parser
	var records []TraceRecord
	lineNo := 0
	for (limit <= 0 || len(records) < limit) && lines.Scan() {
		lineNo++
		line := lines.Bytes()
		if isBlank(line) {
			continue
		}
		rec, err := parseRecord(&parser, line)
		if err != nil {
			return nil, &LineError{Line: lineNo, Err: err}
		}
		records = append(records, rec)
	}
	if err := lines.Err(); err != nil {
		return nil, &LineError{Line: lineNo + 1, Err: err}
	}
	return records, nil
}

// isBlank reports whether a line holds only JSON whitespace.
func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// parseRecord decodes and validates one line.
func parseRecord(parser *fastjson.Parser, line []byte) (TraceRecord, error) {
	v, err := parser.ParseBytes(line)
	if err != nil {
		return TraceRecord{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if v.Type() != fastjson.TypeObject {
		return TraceRecord{}, fmt.Errorf("%w: want a JSON object, got %s", ErrBadRecord, v.Type())
	}
	var rec TraceRecord
	if rec.Timestamp, err = timestampField(v); err != nil {
		return TraceRecord{}, err
	}
	input, err := intField(v, "input_length", 1, MaxInputTokens)
	if err != nil {
		return TraceRecord{}, err
	}
	output, err := intField(v, "output_length", 0, math.MaxInt32)
	if err != nil {
		return TraceRecord{}, err
	}
	rec.InputLength, rec.OutputLength = int(input), int(output)
	if rec.HashIDs, err = hashIDsField(v, rec.InputLength); err != nil {
		return TraceRecord{}, err
	}
	return rec, nil
}

// timestampField reads "timestamp": milliseconds, an integer or a fraction, not negative.
func timestampField(v *fastjson.Value) (time.Duration, error) {
	f := v.Get("timestamp")
	if f == nil {
		return 0, fmt.Errorf("%w: missing timestamp", ErrBadRecord)
	}
	if ms, err := f.Int64(); err == nil && ms >= 0 && ms <= maxTimestampMS {
		return time.Duration(ms) * time.Millisecond, nil
	}
	ms, err := f.Float64()
	if err != nil || ms < 0 || ms > float64(maxTimestampMS) || math.IsNaN(ms) {
		return 0, fmt.Errorf("%w: timestamp: want milliseconds in [0, %d], got %s",
			ErrBadRecord, maxTimestampMS, excerpt(f))
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// intField reads an integer field that must lie in [lo, hi].
func intField(v *fastjson.Value, name string, lo, hi int64) (int64, error) {
	f := v.Get(name)
	if f == nil {
		return 0, fmt.Errorf("%w: missing %s", ErrBadRecord, name)
	}
	n, err := f.Int64()
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s: want an integer in [%d, %d], got %s", ErrBadRecord, name, lo, hi, excerpt(f))
	}
	return n, nil
}

// hashIDsField reads "hash_ids": non-negative integers, ceil(input/BlockTokens) of them.
func hashIDsField(v *fastjson.Value, input int) ([]int64, error) {
	f := v.Get("hash_ids")
	if f == nil {
		return nil, fmt.Errorf("%w: missing hash_ids", ErrBadRecord)
	}
	items, err := f.Array()
	if err != nil {
		return nil, fmt.Errorf("%w: hash_ids: want an array, got %s", ErrBadRecord, f.Type())
	}
	if want := (input + BlockTokens - 1) / BlockTokens; len(items) != want {
		return nil, fmt.Errorf("%w: hash_ids: %d ids for input_length %d, want %d",
			ErrBadRecord, len(items), input, want)
	}
	ids := make([]int64, len(items))
	for i, item := range items {
		id, err := item.Int64()
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%w: hash_ids[%d]: want a non-negative integer, got %s", ErrBadRecord, i, excerpt(item))
		}
		ids[i] = id
	}
	return ids, nil
}

// excerpt renders a JSON value for an error message, cut so that a huge value stays readable.
func excerpt(v *fastjson.Value) string {
	const limit = 40
	text := v.String()
	if len(text) > limit {
		return text[:limit] + "..."
	}
	return text
}

// LoadTraceFile reads the first limit records of the trace file at path
// (limit 0: all of them); a file with no record is an error.
func LoadTraceFile(path string, limit int) ([]TraceRecord, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	records, err := LoadTrace(file, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%s: no records", path)
	}
	return records, nil
}
