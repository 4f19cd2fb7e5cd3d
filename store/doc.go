// Package store is the replicated state of the router tier: the worker
// registry (which workers exist, their role, model and drain state) and the
// cluster-wide routing configuration, kept consistent across replicas by Raft.
//
// Writes are Commands: small versioned JSON documents that are validated and
// normalised before they enter the Raft log and validated again when the FSM
// applies them, so a replica never applies something a stranger could not
// have sent through the admin API. The FSM turns each committed command into a
// new immutable Registry and publishes it through an atomic pointer: the
// routing path reads the registry with one atomic load and never locks, and
// keeps working when no Raft leader exists. Worker ids are small integers the
// FSM hands out in order and never reuses, not after a removal and not across
// snapshots, because gossip messages refer to workers by id.
//
// OpenStores opens the durable side: a bbolt file for the Raft log and stable
// store and a directory of Raft snapshots, both under one data directory.
package store
