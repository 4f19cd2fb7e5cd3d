// Package chaos holds the fault scenarios the router tier is run through as
// a docker-compose cluster (docker-compose.yml: three replicas, four
// simulated workers) and the invariants each must keep: every replica agrees
// on the registry, affinity holds across replicas, in-flight counts return
// to zero once traffic stops, admin writes resume after the Raft leader dies,
// and a killed worker costs retries, not failed requests.
//
// The scenarios run with `make chaos`, which builds the images, starts the
// cluster and runs `go test -tags chaos ./chaos/`; without the tag the
// package has no tests.
package chaos
