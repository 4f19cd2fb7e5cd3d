package cluster

import (
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/store"
)

// The wires a replica speaks to its peers beside the gossip, each with the
// version range this build reads and writes, announced in the gossip
// metadata and compared at join: a peer that speaks none of a wire's
// versions is refused, naming both builds (loadsync.VersionMismatchError).
// docs/compatibility.md states what each wire may change without a new
// version. The gossip's own protocol is loadsync's to announce.
const (
	// wireRPC is the cluster port's HTTP between replicas: the link bytes,
	// the paths (raftnode.ApplyPath, placePath, keyringPath) and their
	// bodies. A replica answers a path it does not serve 404, which its
	// callers take as "not there" rather than as an error of the peer.
	wireRPC = "rpc"
	// wireRaftLog is the Raft log's entries: store.Command's encoding.
	wireRaftLog = "raft-log"
	// wireRegistry is the registry on disk: the snapshots'
	// encoding (the log's entries are wireRaftLog).
	wireRegistry = "registry"
)

// rpcVersion is the version of the cluster port's HTTP.
const rpcVersion = 1

// Wires are the versions of every wire but the gossip this build speaks.
// A range reads every version in it and writes the highest every member of
// the tier reads; this build writes what it reads, one version of each.
func Wires() map[string]loadsync.VersionRange {
	return map[string]loadsync.VersionRange{
		wireRPC:      {Min: rpcVersion, Max: rpcVersion},
		wireRaftLog:  {Min: 1, Max: store.CommandVersion},
		wireRegistry: {Min: 1, Max: store.SnapshotVersion},
	}
}

// legacyWires are what the builds before wires were announced speak
// (v0.1.0 and earlier): version 1 of each.
func legacyWires() map[string]loadsync.VersionRange {
	one := loadsync.VersionRange{Min: 1, Max: 1}
	return map[string]loadsync.VersionRange{wireRPC: one, wireRaftLog: one, wireRegistry: one}
}
