package raftnode

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/kvrouter/kvrouter/store"
)

// bootstrap is what a node does to its data dir before raft starts on it:
// the raft configuration it runs with, the one-voter configuration of a
// fresh single node, and the takeover of a data dir left by another
// --node-name.
type bootstrap struct {
	cfg       Config
	stores    *store.Stores
	transport *raft.NetworkTransport
}

// raftConfig is the raft configuration the node runs with.
func (b bootstrap) raftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(b.cfg.NodeID)
	t := b.cfg.Timings
	c.HeartbeatTimeout = t.Heartbeat
	c.ElectionTimeout = t.Election
	c.LeaderLeaseTimeout = t.LeaderLease
	c.CommitTimeout = t.Commit
	c.SnapshotThreshold = raftSnapshotThreshold
	c.SnapshotInterval = raftSnapshotInterval
	c.TrailingLogs = raftTrailingLogs
	c.NoLegacyTelemetry = true
	c.Logger = newHclogAdapter(b.cfg.Logger, "raft")
	return c
}

// ifNew writes a one-voter configuration before raft starts, so a
// fresh single node needs nobody else; a data dir with state is left alone.
func (b bootstrap) ifNew(conf *raft.Config) error {
	has, err := b.stores.HasState()
	if err != nil || has {
		return err
	}
	self := raft.Server{Suffrage: raft.Voter, ID: conf.LocalID, Address: b.transport.LocalAddr()}
	err = raft.BootstrapCluster(conf, b.stores.Log, b.stores.Stable, b.stores.Snapshots, b.transport,
		raft.Configuration{Servers: []raft.Server{self}})
	if err != nil {
		return fmt.Errorf("raft: bootstrap: %w", err)
	}
	return nil
}

// adoptIfRenamed makes a lone node whose data dir holds a Raft
// configuration without it (the data dir of a replica started before under
// another --node-name) the only voter of that state, keeping its registry.
// Without it the node would wait forever for a leader it can never be.
func (b bootstrap) adoptIfRenamed(conf *raft.Config) error {
	probe, fsm := *conf, store.NewFSM() // GetConfiguration marks the config it is given
	current, err := raft.GetConfiguration(&probe, fsm, b.stores.Log, b.stores.Stable, b.stores.Snapshots, b.transport)
	if err != nil {
		return fmt.Errorf("raft: reading the configuration in --data-dir: %w", fsm.StartError(err))
	}
	for _, s := range current.Servers {
		if s.ID == conf.LocalID {
			return nil
		}
	}
	b.cfg.Logger.Warn("the data dir's raft configuration does not name this node; taking it over as a one-node cluster",
		"node", b.cfg.NodeID, "servers", len(current.Servers))
	self := raft.Server{Suffrage: raft.Voter, ID: conf.LocalID, Address: b.transport.LocalAddr()}
	recover := *conf
	err = raft.RecoverCluster(&recover, store.NewFSM(), b.stores.Log, b.stores.Stable, b.stores.Snapshots, b.transport,
		raft.Configuration{Servers: []raft.Server{self}})
	if err != nil {
		return fmt.Errorf("raft: taking over the data dir under --node-name %q: %w", b.cfg.NodeID, err)
	}
	return nil
}
