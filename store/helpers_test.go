package store

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// logApplier feeds commands to an FSM the way raft would: as committed
// LogCommand entries with increasing indexes.
type logApplier struct {
	t     *testing.T
	fsm   *FSM
	index uint64
}

func newApplier(t *testing.T) *logApplier {
	return &logApplier{t: t, fsm: NewFSM()}
}

func (a *logApplier) apply(cmd Command) Result {
	a.t.Helper()
	data, err := cmd.Encode()
	if err != nil {
		a.t.Fatalf("encode %+v: %v", cmd, err)
	}
	return a.applyRaw(data)
}

// applyRaw applies bytes that may not be a valid command.
func (a *logApplier) applyRaw(data []byte) Result {
	a.index++
	return applyEntry(a.fsm, a.index, data)
}

func applyEntry(f *FSM, index uint64, data []byte) Result {
	res, _ := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(Result)
	return res
}

func (a *logApplier) add(url string) WorkerID {
	a.t.Helper()
	res := a.apply(NewAddWorker(AddWorker{URL: url}))
	if res.Err != nil {
		a.t.Fatalf("add %s: %v", url, res.Err)
	}
	return res.ID
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// snapshotBytes persists f's current state and returns the bytes.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: err=%v closed=%v", err, sink.closed)
	}
	return sink.Bytes()
}

func restoreBytes(f *FSM, data []byte) error {
	return f.Restore(io.NopCloser(bytes.NewReader(data)))
}

// stateOf renders a registry for comparison, everything included.
func stateOf(t *testing.T, r *Registry) string {
	t.Helper()
	data, err := json.Marshal(docOf(r))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
