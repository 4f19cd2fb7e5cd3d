// Package admin serves a replica's admin API: worker registry reads and
// writes (through Raft, forwarded to the leader by the wiring), merged
// loads, cluster status, the tier's routing config, gossip keyring
// rotation, the status page, and vllm-router's legacy worker endpoints,
// behind the admin token or, without one, to loopback clients only. It
// reaches the rest of the replica through the functions of Config; its
// answers are the wire types of package adminapi. Errors map to HTTP
// statuses in one function (ErrorStatus).
package admin
