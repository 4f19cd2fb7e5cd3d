// Package cluster runs one router replica and makes several of them route
// as one. It is the wiring: Start builds a replica from its mechanisms and
// Stop ends every part it started. The Raft node that replicates the worker
// registry and forwards a follower's writes to the leader (package
// raftnode), the cluster port, its mutual TLS and the HTTP between replicas
// (package link), the planner that keeps the Raft configuration in step
// with the gossip membership (package membership), worker health (package
// health), the routing state (package core), the fasthttp proxy, the admin
// API (package admin, whose answers are the wire types of package
// adminapi), and the memberlist gossip that shares each replica's
// in-flight counts, ownership facts and health verdicts with the others
// (gossip.go, over package loadsync).
//
// The two layers divide the work. Gossip carries soft state and liveness:
// a replica's view of its peers' loads lags by about one load interval, and
// a replica whose routing settings differ is refused at join with an error
// naming the fields. Raft holds the authoritative registry; routing reads
// only local memory and keeps working without a leader. Membership joins
// the two: the first --bootstrap-expect replicas to find each other over
// memberlist form the voter set (the lowest-named one bootstraps it), later
// replicas are added by the leader as non-voters, replicas that come back
// at a new address are moved, and those that stay away longer than the reap
// timeout are removed, a non-voter live for the stabilisation time taking a
// removed voter's seat. A follower forwards registry writes to the leader's
// cluster port (raftnode.Forwarder, served by rpc.go); with no leader,
// writes fail at once with 503.
//
// Between replicas, gossip is encrypted with the gossip key (whose keyring
// rotates through the admin API, keyring.go), and everything else crosses
// one cluster port on --raft-bind (link.Port): Raft, and the replicas' own
// HTTP (rpc.go routes it: forwarded writes, keyring changes), with mutual
// TLS against the cluster CA when configured (link.TLS; link.WriteCerts
// makes a CA and certificates). A replica reachable beyond loopback refuses
// to start without both (exposure.go). Reload (reload.go) rereads the TLS
// files on SIGHUP.
package cluster
