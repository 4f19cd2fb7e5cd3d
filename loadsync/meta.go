package loadsync

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// nodeMeta is what a replica announces in memberlist's node metadata: who it
// is and the cluster configuration it runs with. It changes only at start,
// so it never churns memberlist incarnations (load is never put here).
//
// Layout after the header: origin (string), boot epoch (uvarint), field
// count (uvarint), then (name, value) string pairs sorted by name.
type nodeMeta struct {
	origin string
	epoch  uint64
	config map[string]string
}

func appendMeta(b []byte, m *nodeMeta) []byte {
	b = appendHeader(b, msgMeta)
	b = appendString(b, m.origin)
	b = binary.AppendUvarint(b, m.epoch)
	b = binary.AppendUvarint(b, uint64(len(m.config)))
	for _, k := range slices.Sorted(maps.Keys(m.config)) {
		b = appendString(b, k)
		b = appendString(b, m.config[k])
	}
	return b
}

func decodeMeta(msg []byte) (nodeMeta, error) {
	typ, r, err := readHeader(msg)
	if err != nil {
		return nodeMeta{}, err
	}
	if typ != msgMeta {
		return nodeMeta{}, fmt.Errorf("%w: type %d, want %d", ErrUnexpectedMessage, typ, msgMeta)
	}
	m := nodeMeta{origin: r.str(), epoch: r.uvarint()}
	n := r.count(2) // a pair is at least two empty-length prefixes
	m.config = make(map[string]string, n)
	for range n {
		k, v := r.str(), r.str()
		m.config[k] = v
	}
	return m, r.end()
}

// configDiff lists, sorted by name, the fields on which two cluster
// configurations differ.
func configDiff(local, remote map[string]string) []FieldDiff {
	var diffs []FieldDiff
	names := slices.Sorted(maps.Keys(local))
	for k := range remote {
		if _, ok := local[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		if l, r := local[k], remote[k]; l != r {
			diffs = append(diffs, FieldDiff{Field: k, Local: l, Remote: r})
		}
	}
	return diffs
}

// Meta returns this replica's node metadata for memberlist: origin, boot
// epoch, protocol version and cluster configuration, at most 512 bytes.
// The slice is shared and must not be modified.
func (s *State) Meta() []byte { return s.meta }

// CheckJoin decides whether the peer that announced meta may be part of the
// cluster. It returns nil, an error wrapping ErrMalformed or ErrVersion, or a
// *ConfigMismatchError (errors.Is ErrConfigMismatch) naming every differing
// ClusterConfig field.
func (s *State) CheckJoin(meta []byte) error {
	m, err := decodeMeta(meta)
	if err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	if diffs := configDiff(s.cfg.ClusterConfig, m.config); len(diffs) > 0 {
		return &ConfigMismatchError{Peer: m.origin, Diffs: diffs}
	}
	return nil
}
