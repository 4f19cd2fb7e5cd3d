package store

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

func TestStoresPersistTheLogAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasState(); err != nil || has {
		t.Fatalf("fresh stores: HasState = %v, %v", has, err)
	}
	entry := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}
	if err := s.Log.StoreLog(entry); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if has, err := s.HasState(); err != nil || !has {
		t.Fatalf("reopened stores: HasState = %v, %v", has, err)
	}
	var got raft.Log
	if err := s.Log.GetLog(1, &got); err != nil || string(got.Data) != "x" {
		t.Fatalf("log entry after reopen: %+v, %v", got, err)
	}
}

func TestOpenStoresRefusesADataDirInUse(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if second, err := OpenStores(dir); !errors.Is(err, ErrDataDirInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second open: err = %v, want ErrDataDirInUse", err)
	}
}
