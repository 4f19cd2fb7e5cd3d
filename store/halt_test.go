package store

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestACommandOfANewerVersionHaltsTheFSM: a command of a version this build
// does not read, fields it does not know and all, is neither applied nor
// skipped: the FSM halts, applies nothing after it, and refuses to
// snapshot, naming the versions.
func TestACommandOfANewerVersionHaltsTheFSM(t *testing.T) {
	f := NewFSM()
	ok, _ := NewAddWorker(AddWorker{URL: "http://w1:8000"}).Encode()
	if res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: ok}).(Result); res.Err != nil {
		t.Fatal(res.Err)
	}
	newer := []byte(`{"v":2,"kind":"add_worker","add_worker":{"url":"http://w2:8000","weight":3}}`)
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: newer}).(Result)
	if !errors.Is(res.Err, ErrHalted) || !errors.Is(res.Err, ErrUnsupportedVersion) {
		t.Fatalf("a newer command: %v, want the FSM halted on an unsupported version", res.Err)
	}
	later, _ := NewAddWorker(AddWorker{URL: "http://w3:8000"}).Encode()
	if res := f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: later}).(Result); !errors.Is(res.Err, ErrHalted) {
		t.Fatalf("a command after the halt: %v, want ErrHalted", res.Err)
	}
	if reg := f.View(); reg.Len() != 1 || reg.Index() != 1 {
		t.Fatalf("the halted registry holds %d workers at index %d, want what it had: 1 at 1", reg.Len(), reg.Index())
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
		t.Fatalf("Snapshot of a halted FSM = %v, want refused", err)
	}
}
