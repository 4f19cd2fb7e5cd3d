package loadsync

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// What a replica announces of its build in the node metadata, beside the
// caller's tags, so that the peers know what it reads before they send it a
// byte, and a join between builds that cannot share a tier is refused with a
// message naming both. The names are reserved: Config.Tags may not use them.
const (
	// tagRelease is the build's release, Config.Release ("v0.2.0").
	tagRelease = "release"
	// tagWires is the version range of every wire it speaks, by name:
	// "gossip=3,raft-log=1,registry=1,rpc=1-2".
	tagWires = "wire"
	// tagTypes is the message types it reads (readable): "1-10,13".
	tagTypes = "types"
)

// gossipWire names the gossip's own protocol among the wires: the version
// byte of every message but the metadata (protocolVersion).
const gossipWire = "gossip"

// legacyRelease is how a peer that announces no release is named: every
// build before releases were announced.
const legacyRelease = "v0.1.0 or earlier"

// Protocol is the gossip protocol this build speaks and the message types
// it reads, as it announces them ("1-10,13").
func Protocol() (version uint32, types string) { return uint32(protocolVersion), readable.String() }

// VersionRange is the versions of one wire a build speaks, Min to Max: it
// reads all of them and writes one of them, the highest its peers read.
type VersionRange struct{ Min, Max uint32 }

// overlaps reports whether two builds speaking r and o share a version.
func (r VersionRange) overlaps(o VersionRange) bool { return r.Min <= o.Max && o.Min <= r.Max }

func (r VersionRange) String() string {
	if r.Min == r.Max {
		return strconv.FormatUint(uint64(r.Min), 10)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

func parseVersionRange(v string) (VersionRange, bool) {
	lo, hi, ok := parseRange(v, 32)
	return VersionRange{Min: uint32(lo), Max: uint32(hi)}, ok
}

// wiresOf is what cfg speaks: its Wires and the gossip protocol.
func wiresOf(cfg *Config) map[string]VersionRange {
	w := maps.Clone(cfg.Wires)
	if w == nil {
		w = map[string]VersionRange{}
	}
	w[gossipWire] = VersionRange{Min: uint32(protocolVersion), Max: uint32(protocolVersion)}
	return w
}

func formatWires(w map[string]VersionRange) string {
	parts := make([]string, 0, len(w))
	for _, name := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, name+"="+w[name].String())
	}
	return strings.Join(parts, ",")
}

// parseWires reads what formatWires writes, skipping what it cannot read: a
// wire whose versions do not parse is not compared.
func parseWires(v string) map[string]VersionRange {
	w := map[string]VersionRange{}
	for _, part := range strings.Split(v, ",") {
		name, versions, ok := strings.Cut(part, "=")
		if r, parsed := parseVersionRange(versions); ok && parsed {
			w[name] = r
		}
	}
	return w
}

// withBuildTags returns the caller's tags with this build's release, wires
// and readable types added.
func withBuildTags(cfg *Config, tags map[string]string) map[string]string {
	out := maps.Clone(tags)
	if out == nil {
		out = map[string]string{}
	}
	if cfg.Release != "" {
		out[tagRelease] = cfg.Release
	}
	out[tagWires] = formatWires(wiresOf(cfg))
	out[tagTypes] = readsOf(cfg).String()
	return out
}

// readsOf is what this replica reads: this build's messages and its
// channels' (Config.ChannelTypes).
func readsOf(cfg *Config) typeSet {
	s := readable
	for _, t := range cfg.ChannelTypes {
		s[t/64] |= 1 << (t % 64)
	}
	return s
}

// reservedTags refuses caller tags that would overwrite the build's own.
func reservedTags(tags map[string]string) error {
	for _, k := range []string{tagRelease, tagWires, tagTypes} {
		if _, ok := tags[k]; ok {
			return fmt.Errorf("%w: tag %q is reserved for the build's own announcement", ErrInvalidConfig, k)
		}
	}
	return nil
}

// peerBuild is what a peer's metadata says of its build.
type peerBuild struct {
	release string
	wires   map[string]VersionRange
	reads   typeSet
}

// buildOf reads a peer's build from its tags; a peer that announces nothing
// is a build of before announcements, speaking legacy.
func buildOf(tags map[string]string, legacy map[string]VersionRange) peerBuild {
	b := peerBuild{release: tags[tagRelease], reads: legacyReadable}
	if b.release == "" {
		b.release = legacyRelease
	}
	if v, ok := tags[tagWires]; ok {
		b.wires = parseWires(v)
	} else {
		b.wires = maps.Clone(legacy)
		if b.wires == nil {
			b.wires = map[string]VersionRange{}
		}
		b.wires[gossipWire] = VersionRange{Min: uint32(protocolVersion), Max: uint32(protocolVersion)}
	}
	if v, ok := tags[tagTypes]; ok {
		if s, err := parseTypeSet(v); err == nil {
			b.reads = s
		}
	}
	return b
}

// checkVersions refuses a peer that speaks none of our versions of a wire
// both name, the gossip's first: the first such wire is named.
func (s *State) checkVersions(peer string, b peerBuild) error {
	ours := wiresOf(&s.cfg)
	names := slices.Sorted(maps.Keys(ours))
	slices.SortStableFunc(names, func(a, b string) int { return boolCompare(b == gossipWire, a == gossipWire) })
	for _, name := range names {
		theirs, ok := b.wires[name]
		if ok && !ours[name].overlaps(theirs) {
			return &VersionMismatchError{Peer: peer, Wire: name, PeerRelease: b.release, PeerVersions: theirs,
				Release: orUnnamed(s.cfg.Release), Versions: ours[name]}
		}
	}
	return nil
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func orUnnamed(release string) string {
	if release == "" {
		return "an unnamed build"
	}
	return release
}
