package raftnode_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"hash/crc64"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/raftnode/raftnodetest"
	"github.com/kvrouter/kvrouter/internal/testwait"
	"github.com/kvrouter/kvrouter/store"
)

// TestARegistrySnapshotOfANewerBuildIsRefusedAndLeftAsItIs: a data dir whose
// snapshots a newer build wrote (a rollback) does not start, with an error
// naming the snapshot's version and the versions this build reads, and
// neither its snapshots nor its log change (bbolt stamps raft.db's header at
// every open; the entries are what counts).
func TestARegistrySnapshotOfANewerBuildIsRefusedAndLeftAsItIs(t *testing.T) {
	dir := t.TempDir()
	n := raftnodetest.Open(t, "n1", dir, "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, n.Node)
	addWorker(t, n, "http://w1:8000")
	if err := n.Snapshot(raftnodetest.Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	asNewerSnapshots(t, dir)
	before, entries := digestDir(t, filepath.Join(dir, "snapshots")), logEntries(t, dir)
	_, err := raftnode.Open(raftnode.Config{NodeID: "n1", DataDir: dir, BindAddr: "127.0.0.1:0", Bootstrap: true,
		Timings: raftnodetest.LoopbackTimings, Logger: slog.New(slog.DiscardHandler)}, store.NewFSM())
	if !errors.Is(err, store.ErrUnsupportedVersion) || !strings.Contains(err.Error(), "registry snapshot version 2, this build reads up to 1") {
		t.Fatalf("opening a newer build's registry = %v, want it refused naming the versions", err)
	}
	if after := digestDir(t, filepath.Join(dir, "snapshots")); !bytes.Equal(before, after) {
		t.Fatal("the refused snapshots changed")
	}
	if after := logEntries(t, dir); !slices.EqualFunc(entries, after, bytes.Equal) {
		t.Fatal("the refused log changed")
	}
}

// logEntries is the data of every entry of dir's Raft log.
func logEntries(t *testing.T, dir string) [][]byte {
	t.Helper()
	stores, err := store.OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stores.Close()
	first, _ := stores.Log.FirstIndex()
	last, _ := stores.Log.LastIndex()
	var out [][]byte
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := stores.Log.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte{byte(l.Type)}, l.Data...))
	}
	return out
}

// TestACommandOfANewerBuildHaltsTheRegistryAndStaysInTheLog: a command of a
// version this build does not read, in the log (a newer build wrote it),
// halts the FSM: the registry keeps what it had, later commands wait, no
// snapshot compacts the log past it, and it is still in the log when the
// replica stops, for a build that reads it.
func TestACommandOfANewerBuildHaltsTheRegistryAndStaysInTheLog(t *testing.T) {
	dir := t.TempDir()
	n := raftnodetest.Open(t, "n1", dir, "127.0.0.1:0", true)
	raftnodetest.WaitLeader(t, n.Node)
	addWorker(t, n, "http://w1:8000")
	addr := n.Addr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	newer := []byte(`{"v":2,"kind":"add_worker","add_worker":{"url":"http://w2:8000"},"priority":7}`)
	index := appendToLog(t, dir, newer)

	again := raftnodetest.Open(t, "n1", dir, addr, true)
	raftnodetest.WaitLeader(t, again.Node)
	testwait.Eventually(t, raftnodetest.Deadline, func() bool { return again.FSM.Halted() != nil }, "the FSM to halt")
	halted := again.FSM.Halted()
	if !errors.Is(halted, store.ErrHalted) || !strings.Contains(halted.Error(), "command version 2, this build reads up to 1") {
		t.Fatalf("halted with %v, want the versions named", halted)
	}
	if _, ok := again.FSM.View().WorkerByURL("http://w2:8000"); ok {
		t.Fatal("the newer command was applied")
	}
	if _, ok := again.FSM.View().WorkerByURL("http://w1:8000"); !ok {
		t.Fatal("the halted registry lost what it had")
	}
	if _, err := again.Apply(raftnodetest.Context(t), store.NewAddWorker(store.AddWorker{URL: "http://w3:8000"})); !errors.Is(err, store.ErrHalted) {
		t.Fatalf("a write after the halt: %v, want ErrHalted", err)
	}
	if err := again.Snapshot(raftnodetest.Context(t)); err == nil {
		t.Fatal("a halted registry was snapshotted: the log could be compacted past the command")
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	stores, err := store.OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stores.Close()
	var l raft.Log
	if err := stores.Log.GetLog(index, &l); err != nil || !bytes.Equal(l.Data, newer) {
		t.Fatalf("log entry %d after the halt: %q, %v; want the newer command kept", index, l.Data, err)
	}
}

// appendToLog appends a command entry of the log's last term to dir's Raft
// log, as a newer build on the same data dir would have left it, and
// returns its index.
func appendToLog(t *testing.T, dir string, data []byte) uint64 {
	t.Helper()
	stores, err := store.OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stores.Close()
	last, err := stores.Log.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var prev raft.Log
	if err := stores.Log.GetLog(last, &prev); err != nil {
		t.Fatal(err)
	}
	entry := raft.Log{Index: last + 1, Term: prev.Term, Type: raft.LogCommand, Data: data}
	if err := stores.Log.StoreLog(&entry); err != nil {
		t.Fatal(err)
	}
	return entry.Index
}

// asNewerSnapshots rewrites every snapshot under dir as a newer build would
// have written it: version 2 of the registry's encoding, checksums right.
func asNewerSnapshots(t *testing.T, dir string) {
	t.Helper()
	states, err := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if err != nil || len(states) == 0 {
		t.Fatalf("no snapshot under %s: %v", dir, err)
	}
	for _, state := range states {
		data, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.Replace(data, []byte(`{"v":1,`), []byte(`{"v":2,`), 1)
		if err := os.WriteFile(state, data, 0o600); err != nil {
			t.Fatal(err)
		}
		metaPath := filepath.Join(filepath.Dir(state), "meta.json")
		var meta map[string]any
		raw, err := os.ReadFile(metaPath)
		if err != nil || json.Unmarshal(raw, &meta) != nil {
			t.Fatalf("snapshot meta %s: %v", metaPath, err)
		}
		sum := crc64.New(crc64.MakeTable(crc64.ECMA))
		sum.Write(data)
		meta["CRC"], meta["Size"] = sum.Sum(nil), len(data)
		if raw, err = json.Marshal(meta); err != nil || os.WriteFile(metaPath, raw, 0o600) != nil {
			t.Fatalf("rewriting %s: %v", metaPath, err)
		}
	}
}

// digestDir hashes every file's path and contents under dir.
func digestDir(t *testing.T, dir string) []byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		h.Write([]byte(path))
		h.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil)
}
