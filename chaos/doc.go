// Package chaos holds the fault scenarios the router tier is run through as
// a Compose cluster (docker-compose.yml: three replicas, four simulated
// workers, a named volume per replica's data) and the invariants each must
// keep: every client request answered, or failed before its first byte and
// retried by the client on another replica; no stream cut silently; loads
// back to zero on every replica; one registry everywhere; the membership
// converged within 10 s of healing; no acknowledged drain lost; the hit rate
// after healing within 5 points of before. Each scenario prints its figures,
// and the run ends with a table of them (also written to $CHAOS_REPORT).
//
// The scenarios run with `make chaos` (scripts/chaos.sh), which builds the
// images, starts the cluster and runs `go test -tags chaos ./chaos/`;
// CHAOS_RUN picks scenarios. Without the tag the package has no tests.
package chaos
