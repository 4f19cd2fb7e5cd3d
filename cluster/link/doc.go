// Package link is what connects the replicas of a tier to each other: the
// cluster port (one listener on --raft-bind whose connections announce
// their kind by a first byte and carry either Raft or the replicas' own
// HTTP), its mutual TLS against the cluster CA, the certificates
// `router tls init` makes, and both halves of the HTTP between replicas
// (Client for calls, Serve for the answers). It knows nothing of routing
// or of the registry: Raft runs over Port.RaftLayer, the wiring decides
// which paths the HTTP serves.
package link
