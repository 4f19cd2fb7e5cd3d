// Package adminapi holds the wire types of a replica's admin API: the JSON
// answers of /get_loads, /cluster/status, /cluster/workers,
// /cluster/history, /cluster/routing and /cluster/keyring, and the
// OpenAI-style error body. The server (package cluster and its admin
// package) encodes them; the command line decodes them without importing
// the server. Types only: nothing here runs.
package adminapi
