package loadsync

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Callers branch on them with errors.Is; the wrapped text
// says what exactly was wrong.
var (
	// ErrMalformed reports a message that does not decode: truncated,
	// out of range, or with trailing bytes.
	ErrMalformed = errors.New("loadsync: malformed message")
	// ErrVersion reports a message of a protocol version this build does
	// not speak.
	ErrVersion = errors.New("loadsync: unsupported protocol version")
	// ErrUnexpectedMessage reports a well-formed header of a message type
	// that the called method does not accept.
	ErrUnexpectedMessage = errors.New("loadsync: unexpected message type")
	// ErrInvalidConfig reports a Config or GossipConfig that cannot work.
	ErrInvalidConfig = errors.New("loadsync: invalid config")
	// ErrConfigMismatch reports a peer whose cluster-wide configuration
	// differs from ours; the error is a *ConfigMismatchError.
	ErrConfigMismatch = errors.New("config mismatch")
	// ErrJoin reports that none of the join addresses could be joined.
	ErrJoin = errors.New("loadsync: join failed")
	// ErrVersionMismatch reports a peer of a build that cannot share a
	// tier with this one; the error is a *VersionMismatchError.
	ErrVersionMismatch = errors.New("version mismatch")
)

// VersionMismatchError names a peer whose build speaks none of this
// build's versions of a wire (the gossip, the cluster port's RPCs, Raft's
// log, the registry on disk), with both releases and version ranges. It
// unwraps to ErrVersionMismatch.
type VersionMismatchError struct {
	Peer, PeerRelease string
	Wire              string
	PeerVersions      VersionRange
	Release           string
	Versions          VersionRange
}

// Error reads like "version mismatch with peer "r9": it runs v0.9.0 and
// speaks gossip version 5; this replica runs v0.2.0 and speaks gossip
// version 3: ...".
func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("%s with peer %q: it runs %s and speaks %s version %s; this replica runs %s and speaks %s version %s: "+
		"replicas share a tier only while they speak a common version of every wire (docs/compatibility.md); "+
		"upgrade one release at a time", ErrVersionMismatch, e.Peer, e.PeerRelease, e.Wire, e.PeerVersions,
		e.Release, e.Wire, e.Versions)
}

// Unwrap lets errors.Is(err, ErrVersionMismatch) hold.
func (e *VersionMismatchError) Unwrap() error { return ErrVersionMismatch }

// FieldDiff is one cluster configuration field whose value differs between
// this replica (Local) and a peer (Remote). An empty value means unset.
type FieldDiff struct {
	Field  string
	Local  string
	Remote string
}

// ConfigMismatchError names every cluster configuration field on which a
// peer disagrees with this replica. It unwraps to ErrConfigMismatch.
type ConfigMismatchError struct {
	Peer  string
	Diffs []FieldDiff
}

// Error reads like "config mismatch with peer r2: block_size 256 vs 128",
// local value first.
func (e *ConfigMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s with peer %q:", ErrConfigMismatch, e.Peer)
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %s vs %s", d.Field, orUnset(d.Local), orUnset(d.Remote))
	}
	return b.String()
}

// Unwrap lets errors.Is(err, ErrConfigMismatch) hold.
func (e *ConfigMismatchError) Unwrap() error { return ErrConfigMismatch }

func orUnset(v string) string {
	if v == "" {
		return "<unset>"
	}
	return v
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func versionError(v byte) error {
	return fmt.Errorf("%w: %d (this build speaks %d)", ErrVersion, v, protocolVersion)
}
