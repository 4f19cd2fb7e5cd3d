package loadsync

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// nodeMeta is what a replica announces in memberlist's node metadata: who it
// is, the cluster configuration it runs with, and its tags (the addresses of
// its other services, say, and its build: compat.go). Config is compared at
// join; of the tags, only the build's versions are. Meta changes only at
// start and on the rare SetTags, so it never churns memberlist
// incarnations (load is never put here).
//
// Layout after the header: origin (string), boot epoch (uvarint), then two
// maps, config and tags, each as a count (uvarint) and (name, value) string
// pairs sorted by name. Fields a newer build appends are ignored. The
// header's version is metaVersion whatever protocolVersion becomes: the
// metadata is how two builds learn whether they can talk at all, so every
// build must read every other's, to say why it refuses it.
type nodeMeta struct {
	origin string
	epoch  uint64
	config map[string]string
	tags   map[string]string
}

// metaVersion is the version byte of the metadata, fixed for good.
const metaVersion byte = 3

func appendMeta(b []byte, m *nodeMeta) []byte {
	b = append(b, msgMeta, metaVersion)
	b = appendString(b, m.origin)
	b = binary.AppendUvarint(b, m.epoch)
	b = appendStringMap(b, m.config)
	return appendStringMap(b, m.tags)
}

func appendStringMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	return b
}

func decodeMeta(msg []byte) (nodeMeta, error) {
	if len(msg) < headerBytes {
		return nodeMeta{}, malformed("%d bytes, shorter than a header", len(msg))
	}
	if msg[0] != msgMeta {
		return nodeMeta{}, fmt.Errorf("%w: type %d, want %d", ErrUnexpectedMessage, msg[0], msgMeta)
	}
	if msg[1] != metaVersion {
		return nodeMeta{}, fmt.Errorf("%w: metadata version %d (every build writes %d)", ErrVersion, msg[1], metaVersion)
	}
	r := reader{buf: msg, off: headerBytes}
	m := nodeMeta{origin: r.str(), epoch: r.uvarint()}
	m.config = readStringMap(&r)
	m.tags = readStringMap(&r)
	return m, r.err()
}

func readStringMap(r *reader) map[string]string {
	n := r.count(2) // a pair is at least two empty-length prefixes
	m := make(map[string]string, n)
	for range n {
		k, v := r.str(), r.str()
		m[k] = v
	}
	return m
}

// encodeMeta encodes this replica's metadata with tags and its build's,
// refusing what would not fit memberlist's limit.
func encodeMeta(cfg *Config, tags map[string]string) ([]byte, error) {
	if err := validMap("Tags", tags); err != nil {
		return nil, err
	}
	if err := reservedTags(tags); err != nil {
		return nil, err
	}
	all := withBuildTags(cfg, tags)
	if cfg.asLegacyBuild {
		all = tags
	}
	if err := validMap("Release and build", all); err != nil {
		return nil, err
	}
	meta := appendMeta(nil, &nodeMeta{origin: cfg.Origin, epoch: cfg.BootEpoch, config: cfg.ClusterConfig, tags: all})
	if len(meta) > maxMetaBytes {
		return nil, fmt.Errorf("%w: ClusterConfig and Tags encode to %d bytes of node metadata, over %d",
			ErrInvalidConfig, len(meta), maxMetaBytes)
	}
	return meta, nil
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
// epoch, cluster configuration, tags and the build's release, wire versions
// and readable message types, at most 512 bytes. The slice is shared and
// must not be modified.
func (s *State) Meta() []byte { return *s.meta.Load() }

// SetTags replaces the tags announced in Meta. It refuses tags that would
// not fit (ErrInvalidConfig) and then keeps the old ones. Gossip.SetTags
// also tells the peers; call this one only on a State driven by hand.
func (s *State) SetTags(tags map[string]string) error {
	meta, err := encodeMeta(&s.cfg, tags)
	if err != nil {
		return err
	}
	s.meta.Store(&meta)
	return nil
}

// CheckJoin decides whether the peer that announced meta may be part of the
// cluster. It returns nil, an error wrapping ErrMalformed or ErrVersion, a
// *VersionMismatchError (errors.Is ErrVersionMismatch) when the peer's build
// speaks none of this one's versions of a wire, or a *ConfigMismatchError
// (errors.Is ErrConfigMismatch) naming every differing ClusterConfig field.
// The caller's tags are not compared.
func (s *State) CheckJoin(meta []byte) error {
	m, err := decodeMeta(meta)
	if err != nil {
		return fmt.Errorf("peer metadata: %w", err)
	}
	if err := s.checkVersions(m.origin, buildOf(m.tags, s.cfg.LegacyWires)); err != nil {
		return err
	}
	if diffs := configDiff(s.cfg.ClusterConfig, m.config); len(diffs) > 0 {
		return &ConfigMismatchError{Peer: m.origin, Diffs: diffs}
	}
	return nil
}
