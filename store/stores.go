package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Stores is the durable side of a replica's Raft node, all under one data
// directory: raft.db (bbolt) holds the log and the stable store (term, vote),
// snapshots/ the registry snapshots. Safe for concurrent use as Raft uses it.
type Stores struct {
	// Log is the Raft log, with a small in-memory cache of recent entries
	// in front of bbolt.
	Log raft.LogStore
	// Stable holds the current term and vote.
	Stable raft.StableStore
	// Snapshots keeps the newest snapshotsRetained registry snapshots.
	Snapshots raft.SnapshotStore

	bolt *raftboltdb.BoltStore
}

const (
	// logCacheEntries is how many recent log entries stay in memory; they
	// serve replication to followers that are just behind.
	logCacheEntries = 512
	// snapshotsRetained is how many snapshots stay on disk.
	snapshotsRetained = 2
	// lockTimeout is how long opening raft.db waits for another process's
	// lock before giving up with ErrDataDirInUse.
	lockTimeout = time.Second
)

// OpenStores opens (creating when needed, mode 0700) the Raft stores under
// dataDir. A data directory held by another open Stores fails with
// ErrDataDirInUse after about a second. Close releases everything.
func OpenStores(dataDir string) (*Stores, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	bolt, err := openBolt(filepath.Join(dataDir, "raft.db"))
	if err != nil {
		return nil, err
	}
	cached, err := raft.NewLogCache(logCacheEntries, bolt)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raft log cache: %w", err), bolt.Close())
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raft snapshot store: %w", err), bolt.Close())
	}
	return &Stores{Log: cached, Stable: bolt, Snapshots: snaps, bolt: bolt}, nil
}

func openBolt(path string) (*raftboltdb.BoltStore, error) {
	bolt, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bbolt.Options{Timeout: lockTimeout},
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s is locked by another process", ErrDataDirInUse, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", path, err)
	}
	return bolt, nil
}

// HasState reports whether the stores hold any Raft state (log entries, a
// term or a snapshot): a node with state must not be bootstrapped again.
func (s *Stores) HasState() (bool, error) {
	return raft.HasExistingState(s.Log, s.Stable, s.Snapshots)
}

// Close closes the bbolt file. Call it after the Raft node using the stores
// has shut down.
func (s *Stores) Close() error {
	return s.bolt.Close()
}
