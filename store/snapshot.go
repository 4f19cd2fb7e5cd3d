package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// SnapshotVersion is the snapshot encoding this build writes; Restore reads
// versions 1..SnapshotVersion.
const SnapshotVersion = 1

// maxSnapshotBytes bounds what Restore reads: a snapshot also arrives from
// the leader over the network, and even 100k workers stay far below it.
const maxSnapshotBytes = 256 << 20

// snapshotDoc is the persisted form of a Registry. NextID is stored rather
// than derived from the workers so that the ids of removed workers stay
// retired after a restore.
type snapshotDoc struct {
	Version       int            `json:"v"`
	Index         uint64         `json:"index"`
	NextID        WorkerID       `json:"next_id"`
	Workers       []Worker       `json:"workers"`
	RoutingConfig *RoutingConfig `json:"routing_config,omitempty"`
	RoutingIndex  uint64         `json:"routing_index,omitempty"`
	Seeded        bool           `json:"seeded,omitempty"`
	// AwaitingWorkerSeed is absent from the snapshots of builds before it,
	// whose seeded registries took no later seed's workers: false keeps that.
	AwaitingWorkerSeed bool `json:"awaiting_worker_seed,omitempty"`
}

func docOf(r *Registry) snapshotDoc {
	return snapshotDoc{Version: SnapshotVersion, Index: r.index, NextID: r.nextID,
		Workers: r.workers, RoutingConfig: r.routing, RoutingIndex: r.routingIndex, Seeded: r.seeded,
		AwaitingWorkerSeed: r.awaitingWorkerSeed}
}

// fsmSnapshot is a point-in-time registry waiting to be persisted.
type fsmSnapshot struct{ reg *Registry }

var _ raft.FSMSnapshot = fsmSnapshot{}

// Snapshot captures the current registry. It only takes a pointer: the
// encoding happens in Persist, off the FSM goroutine. A halted FSM refuses,
// so that raft keeps the log it could not apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.Halted(); err != nil {
		return nil, err
	}
	return fsmSnapshot{reg: f.View()}, nil
}

// Persist writes the snapshot as one JSON document.
func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(docOf(s.reg)); err != nil {
		return errors.Join(fmt.Errorf("persist registry snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

// Release does nothing: the registry is garbage collected when unreferenced.
func (fsmSnapshot) Release() {}

// Restore replaces the state with a snapshot, after validating it as
// strictly as a command from a stranger. On error the state is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("read registry snapshot: %w", err)
	}
	reg, err := decodeSnapshot(data)
	if err != nil {
		f.restoreErr.Store(&err)
		return err
	}
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	f.publish(reg)
	return nil
}

func decodeSnapshot(data []byte) (*Registry, error) {
	if len(data) > maxSnapshotBytes {
		return nil, fmt.Errorf("%w: registry snapshot exceeds %d bytes", ErrInvalid, maxSnapshotBytes)
	}
	if err := checkVersion(data, "registry snapshot", SnapshotVersion); err != nil {
		return nil, err
	}
	var doc snapshotDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: decode registry snapshot: %w", ErrInvalid, err)
	}
	if err := doc.validate(); err != nil {
		return nil, err
	}
	reg := newRegistry(doc.Workers, doc.RoutingConfig, doc.Index, doc.NextID)
	reg.routingIndex, reg.seeded, reg.awaitingWorkerSeed = doc.RoutingIndex, doc.Seeded, doc.AwaitingWorkerSeed
	return reg, nil
}

func (d *snapshotDoc) validate() error {
	if d.Version < 1 || d.Version > SnapshotVersion {
		return fmt.Errorf("%w: registry snapshot version %d, this build reads 1..%d (a newer build wrote it: run that one or a later one)",
			ErrUnsupportedVersion, d.Version, SnapshotVersion)
	}
	if d.NextID < firstWorkerID {
		return fmt.Errorf("%w: snapshot next_id %d < %d", ErrInvalid, d.NextID, firstWorkerID)
	}
	if d.RoutingConfig != nil {
		if err := d.RoutingConfig.Validate(); err != nil {
			return fmt.Errorf("snapshot routing config: %w", err)
		}
	}
	if d.RoutingIndex > d.Index {
		return fmt.Errorf("%w: snapshot routing_index %d is past its index %d", ErrInvalid, d.RoutingIndex, d.Index)
	}
	return d.validateWorkers()
}

func (d *snapshotDoc) validateWorkers() error {
	seen := make(map[string]bool, len(d.Workers))
	prev := WorkerID(0)
	for i := range d.Workers {
		w := &d.Workers[i]
		if err := validateStoredWorker(w, prev, d.NextID); err != nil {
			return fmt.Errorf("snapshot worker %d: %w", i, err)
		}
		if seen[w.URL] {
			return fmt.Errorf("snapshot worker %d: %w", i, fieldError("url", "%s appears twice", w.URL))
		}
		seen[w.URL], prev = true, w.ID
		w.Labels = cloneLabels(w.Labels)
	}
	return nil
}

// validateStoredWorker checks one snapshot entry: ids strictly increasing
// and below nextID, everything else as AddWorker would have left it.
func validateStoredWorker(w *Worker, prev, nextID WorkerID) error {
	if w.ID <= prev || w.ID >= nextID {
		return fieldError("id", "%d is out of order or not below next_id %d", w.ID, nextID)
	}
	if u, err := NormalizeURL(w.URL); err != nil || u != w.URL {
		return fieldError("url", "%q is not a normalised worker URL", w.URL)
	}
	if !w.Role.Valid() {
		return fieldError("role", "%q is not a role", w.Role)
	}
	if !w.State.Valid() {
		return fieldError("state", "%q is not a state", w.State)
	}
	if err := validateModel(w.Model); err != nil {
		return err
	}
	if err := validateBootstrapPort(w.BootstrapPort); err != nil {
		return err
	}
	if ep, err := NormalizeKVEventsEndpoint(w.KVEventsEndpoint); err != nil || ep != w.KVEventsEndpoint {
		return fieldError("kv_events_endpoint", "%q is not a normalised tcp://host:port", w.KVEventsEndpoint)
	}
	if ep, err := NormalizeEndpointField("kv_events_replay_endpoint", w.KVEventsReplayEndpoint); err != nil ||
		ep != w.KVEventsReplayEndpoint {
		return fieldError("kv_events_replay_endpoint", "%q is not a normalised tcp://host:port", w.KVEventsReplayEndpoint)
	}
	if err := ValidateKVEventsTopic(w.KVEventsTopic); err != nil {
		return err
	}
	return validateLabels(w.Labels)
}
