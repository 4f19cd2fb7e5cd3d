package loadsync

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAMessageOfAnUnknownTypeIsSkippedAndCountedApart: a type this build
// does not know (a newer build's) changes nothing, is no error, and counts
// as unknown, not as a decode error, whose alert pages.
func TestAMessageOfAnUnknownTypeIsSkippedAndCountedApart(t *testing.T) {
	b := newReplica(t, "b", nil)
	for _, typ := range []byte{11, 12, 14, 200} {
		if err := b.st.Receive([]byte{typ, protocolVersion, 1, 2, 3}, t0); err != nil {
			t.Fatalf("type %d: Receive = %v, want it skipped", typ, err)
		}
	}
	if st := b.st.Stats(); st.UnknownMessages != 4 || st.DecodeErrors != 0 {
		t.Fatalf("unknown %d, decode errors %d; want 4 unknown and no error", st.UnknownMessages, st.DecodeErrors)
	}
	if len(b.st.Origins(t0)) != 0 || len(b.learned.all()) != 0 {
		t.Fatal("an unknown message changed the state")
	}
}

// TestAKnownMessageWithFieldsAppendedDecodes: bytes after the fields this
// build knows, in every type, and a section of a kind it does not know in a
// report, are what a newer build added: they are skipped and the rest
// applies.
func TestAKnownMessageWithFieldsAppendedDecodes(t *testing.T) {
	a := newVerdictReplica(t, "a", nil)
	a.local.set(3, 2)
	a.st.Owned(chain(1, 4), 3)
	a.st.Judged(3, true)
	a.board.set(wedged3)
	asLegacy(newReplica(t, "unused", nil), a.replica) // the older types too
	pkts := a.st.Tick(t0)
	pkts = append(pkts,
		appendQueueReport(nil, &queueReport{origin: "a", epoch: 1, seq: 1, depths: []QueueDepth{{Class: 1, Tenant: 9, Queued: 2}}}),
		appendCounted(nil, "a", Counted{Through: 5}))
	seen := map[byte]bool{}
	for _, p := range pkts {
		b := newVerdictReplica(t, "b", nil)
		ext := append(slices.Clone(p), 0x01, 0x7f, 0x42)
		if p[0] == msgReport { // a section of an unknown kind, then one with a field appended
			ext = append(slices.Clone(p), 99, 2, 0xaa, 0xbb, secCounted, 3, 9, 0, 0x55)
		}
		if err := b.st.Receive(ext, t0); err != nil {
			t.Fatalf("type %d with fields appended: %v", p[0], err)
		}
		seen[p[0]] = true
	}
	for _, typ := range []byte{msgLoad, msgDigest, msgVerdicts, msgCalibrations, msgQueues, msgCounted, msgReport} {
		if !seen[typ] {
			t.Errorf("no message of type %d was tried", typ)
		}
	}
	// And what they carry still applies.
	b := newReplica(t, "b", nil)
	for _, p := range pkts {
		if p[0] == msgReport {
			_ = b.st.Receive(append(slices.Clone(p), 99, 1, 0), t0)
		}
	}
	if got := b.st.Remote(3); got != 2 {
		t.Fatalf("a report with a section appended brought a count of %d, want 2", got)
	}
}

// TestAPeerOfAnOlderBuildIsSentOnlyWhatItReads: a peer that announces no
// types (v0.1.0 and before) reads the older types and is sent neither
// msgReport nor the types it supersedes to the others; a peer of this build
// is sent msgReport and not the older types it supersedes.
func TestAPeerOfAnOlderBuildIsSentOnlyWhatItReads(t *testing.T) {
	old := buildOf(map[string]string{"raft": "10.0.0.1:7947"}, nil)
	current := buildOf(withBuildTags(&Config{Release: "v0.2.0"}, nil), nil)
	for _, tc := range []struct {
		typ          byte
		old, current bool
	}{
		{msgReport, false, true},
		{msgLoad, true, false}, {msgLoadDelta, true, false}, {msgBacklog, true, false},
		{msgCounted, true, false}, {msgCalibrations, true, false}, {msgDigest, true, false},
		{msgQueues, true, true}, {msgVerdicts, true, true},
		{11, false, false}, // a type this build does not read is sent to nobody who did not announce it
	} {
		if got := old.reads.wants(tc.typ); got != tc.old {
			t.Errorf("type %d to a peer of v0.1.0: %v, want %v", tc.typ, got, tc.old)
		}
		if got := current.reads.wants(tc.typ); got != tc.current {
			t.Errorf("type %d to a peer of this build: %v, want %v", tc.typ, got, tc.current)
		}
	}
	if old.release != legacyRelease || current.release != "v0.2.0" {
		t.Errorf("releases %q and %q", old.release, current.release)
	}
}

// TestATierOfBothBuildsConvergesAndTheOlderCountsNoError runs a replica of
// this build and one that behaves as v0.1.0 on the wire over real
// memberlist: each learns the other's loads and facts, the older one is
// sent nothing it does not read (no decode error, nothing unknown), and once
// it leaves, the newer one stops making the older types.
func TestATierOfBothBuildsConvergesAndTheOlderCountsNoError(t *testing.T) {
	current := mustStart(t, "current", nodeOptions{tweak: func(c *Config) { c.Release = "v0.2.0" }})
	old := mustStart(t, "old", nodeOptions{join: []string{current.g.LocalAddr()},
		tweak: func(c *Config) { c.asLegacyBuild = true }})
	waitFor(t, "both see each other", func() bool { return len(current.g.Members()) == 2 && len(old.g.Members()) == 2 })
	current.local.set(1, 4)
	old.local.set(2, 7)
	current.st.Owned(chain(7, 3), 1)
	waitFor(t, "the older build has the newer one's load and facts", func() bool {
		return old.st.Remote(1) == 4 && old.learned.has(Fact{Hash: chain(7, 3)[2], Worker: 1, Span: 1})
	})
	waitFor(t, "the newer build has the older one's load", func() bool { return current.st.Remote(2) == 7 })
	if st := old.st.Stats(); st.DecodeErrors != 0 || st.UnknownMessages != 0 {
		t.Fatalf("the older build counted %d decode errors and %d unknown messages, want none", st.DecodeErrors, st.UnknownMessages)
	}
	var m Member
	for _, mb := range current.g.Members() {
		if mb.Name == "old" {
			m = mb
		}
	}
	if m.Release != legacyRelease || m.Reads(msgReport) {
		t.Fatalf("the older peer is seen as %+v", m)
	}
	if !current.st.reports.legacyPeers.Load() {
		t.Fatal("the newer build does not make the older types for its older peer")
	}
	if err := old.g.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the newer build stops making the older types", func() bool { return !current.st.reports.legacyPeers.Load() })
}

// TestAJoinOfABuildThatSpeaksNoCommonVersionIsRefusedNamingBoth: a peer of a
// far newer or far older build, whose versions of some wire do not overlap
// ours, is refused at join with an error naming both releases and versions,
// whichever side checks; a peer whose versions overlap, or of a build that
// announces none where the legacy versions overlap, is accepted.
func TestAJoinOfABuildThatSpeaksNoCommonVersionIsRefusedNamingBoth(t *testing.T) {
	ours := func(c *Config) {
		c.Release = "v0.2.0"
		c.Wires = map[string]VersionRange{"rpc": {1, 1}, "raft-log": {1, 2}}
		c.LegacyWires = map[string]VersionRange{"rpc": {1, 1}, "raft-log": {1, 1}}
	}
	a := newReplica(t, "a", ours)
	metaOf := func(release string, wires map[string]VersionRange) []byte {
		p := newReplica(t, "peer", func(c *Config) { c.Release, c.Wires = release, wires })
		return p.st.Meta()
	}
	for _, tc := range []struct {
		name    string
		meta    []byte
		refused string
	}{
		{"far newer RPCs", metaOf("v0.9.0", map[string]VersionRange{"rpc": {3, 4}, "raft-log": {2, 3}}),
			`peer "peer": it runs v0.9.0 and speaks rpc version 3-4; this replica runs v0.2.0 and speaks rpc version 1`},
		{"far older log", metaOf("v0.0.3", map[string]VersionRange{"rpc": {1, 1}, "raft-log": {0, 0}}),
			`it runs v0.0.3 and speaks raft-log version 0; this replica runs v0.2.0 and speaks raft-log version 1-2`},
		{"overlapping", metaOf("v0.3.0", map[string]VersionRange{"rpc": {1, 2}, "raft-log": {2, 3}}), ""},
		{"a build that announces nothing", newReplica(t, "peer", func(c *Config) { c.asLegacyBuild = true }).st.Meta(), ""},
		{"a wire we do not speak", metaOf("v0.3.0", map[string]VersionRange{"kv-events": {5, 5}}), ""},
	} {
		err := a.st.CheckJoin(tc.meta)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (!errors.Is(err, ErrVersionMismatch) || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: CheckJoin = %v, want a version mismatch saying %q", tc.name, err, tc.refused)
		}
	}
	// The gossip protocol is a wire like the others, compared first; the
	// metadata's own layout stays readable whatever it is.
	meta := appendMeta(nil, &nodeMeta{origin: "next", epoch: 1, config: map[string]string{"block_size": "256"},
		tags: map[string]string{tagRelease: "v3.0.0", tagWires: "gossip=5,rpc=7", tagTypes: "1-40"}})
	err := a.st.CheckJoin(meta)
	if !errors.Is(err, ErrVersionMismatch) || !strings.Contains(err.Error(), "it runs v3.0.0 and speaks gossip version 5; this replica runs v0.2.0 and speaks gossip version 3") {
		t.Fatalf("a peer of gossip protocol 5: %v", err)
	}
}

// TestGossipRefusesAFarNewerBuildAtJoin: over real memberlist, the joiner
// of a far newer build is refused, and its Join says why, naming both
// releases; it never becomes a member.
func TestGossipRefusesAFarNewerBuildAtJoin(t *testing.T) {
	first := mustStart(t, "r0", nodeOptions{tweak: func(c *Config) {
		c.Release, c.Wires = "v0.2.0", map[string]VersionRange{"rpc": {1, 1}}
	}})
	_, err := startNode(t, "far", nodeOptions{join: []string{first.g.LocalAddr()}, tweak: func(c *Config) {
		c.Release, c.Wires = "v0.9.0", map[string]VersionRange{"rpc": {4, 4}}
	}})
	if !errors.Is(err, ErrVersionMismatch) || !strings.Contains(err.Error(), "v0.9.0") || !strings.Contains(err.Error(), "v0.2.0") {
		t.Fatalf("join of a far newer build = %v, want a version mismatch naming both releases", err)
	}
	if got := len(first.g.Members()); got != 1 {
		t.Fatalf("the refused replica became a member: %d members", got)
	}
	waitFor(t, "the existing member counts the refusal", func() bool { return first.g.Stats().JoinRefusals > 0 })
}

// TestReservedTagsAreRefused: the caller cannot announce a build it is not.
func TestReservedTagsAreRefused(t *testing.T) {
	r := newReplica(t, "a", nil)
	for _, tag := range []string{tagRelease, tagWires, tagTypes} {
		if err := r.st.SetTags(map[string]string{tag: "x"}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetTags(%s) = %v, want ErrInvalidConfig", tag, err)
		}
	}
}

// TestTheTypesAnnouncedRoundTrip: what a build announces of the types it
// reads is read back as such, and garbage as nothing but the legacy set.
func TestTheTypesAnnouncedRoundTrip(t *testing.T) {
	if got, err := parseTypeSet(readable.String()); err != nil || got != readable {
		t.Fatalf("parse(%q) = %v, %v", readable.String(), got, err)
	}
	if got := readable.String(); got != "1-10,13" {
		t.Fatalf("this build announces %q", got)
	}
	b := buildOf(map[string]string{tagTypes: "3-x"}, nil)
	if b.reads != legacyReadable {
		t.Fatal("unreadable types were not taken as the legacy set")
	}
}

// TestTheLagOfAStepIsTheLagOfItsOrigin: a flush's step says no epoch (it
// steps on what the receiver holds), yet its send time, relative to that
// epoch, gives the receiver the lag it measures for every report.
func TestTheLagOfAStepIsTheLagOfItsOrigin(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) { c.BootEpoch = uint64(t0.Add(-time.Hour).UnixNano()) })
	b := newReplica(t, "b", nil)
	busy(a, 50) // a full report larger than a step
	deliver(t, a.st.Tick(t0), t0, b)
	for i := 1; i <= 5; i++ {
		a.local.set(1, int64(i+1))
		at := t0.Add(time.Duration(i) * DefaultLoadFlushInterval)
		pkts := a.st.Tick(at)
		if len(pkts) == 0 || !hasSection(pkts[len(pkts)-1], secLoadStep) {
			continue // not a flush's step
		}
		deliver(t, pkts, at.Add(3*time.Millisecond), b)
		if lag := b.st.Origins(at)[0].LastLag; lag != 3*time.Millisecond {
			t.Fatalf("the lag of a step sent at %v and heard 3 ms later is %v", at, lag)
		}
		return
	}
	t.Fatal("no report was a step")
}
