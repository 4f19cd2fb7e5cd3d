// Package raftnode is a replica's member of the Raft cluster that
// replicates the worker registry: hashicorp/raft over the cluster port
// (package link) with bbolt stores (package store), applying commands to a
// store.FSM, with its logs sent to slog (hclog.go). A follower's writes
// reach the leader through Forwarder (forward.go), which posts them to the
// leader's cluster port; the leader applies them and never forwards again.
package raftnode
