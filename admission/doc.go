// Package admission decides which request goes to the engines next when they
// cannot take every request at once.
//
// A request arrives with a class (an ordered priority band: system,
// interactive, default, bulk unless the operator names others), a tenant
// (its API key's, as the operator gives keys tenants, or without keys a
// header the operator names) and a cost in tokens (prompt plus expected
// output). The Scheduler admits it at once while there is room, and
// otherwise queues it. Room is the smallest of three bounds: the in-flight
// limit (--max-concurrent-requests), the rate bucket
// (--rate-limit-tokens-per-second) and the engines' own capacity, which
// Capacity learns from what the engines report (a worker whose
// vllm:num_requests_waiting is above zero, or whose KV cache is full, is
// running all it can). When room frees, the highest class with a request
// that may go is served first, except that a class never takes the slots
// reserved for the classes above it while they are unused (unless Lend: for
// engines that queue by priority, a lower class borrows them and the class
// they are reserved for takes them back over the engines' limit, first in
// the engine's queue for the next slot that frees); within a class,
// tenants are served by deficit round robin weighted by tokens, so a burst
// of one tenant delays the others by at most one quantum per round.
//
// A replica of a tier does not see the requests that go through the others,
// so the Scheduler also takes the peers' queue reports (Peer): per class and
// tenant, requests queued and tokens in flight. With them, a tenant whose
// tokens in flight across the tier exceed another waiting tenant's by more
// than one request waits, even at a replica where it is the only tenant
// queued, so a tenant's share does not depend on how its requests spread
// over the replicas. The room the engines leave is shared the same way: a
// replica takes its share of it among the peers that report requests
// waiting, since each learns of the others' admissions only from their next
// report; and while the engines bound the room, a request waits while its
// tenant has an older request waiting at a peer, so that a slot that frees
// goes to the tier's longest-waiting request wherever it waits, and a
// request waits about as long wherever it arrived, as in one queue (a
// replica leaves free at most the slots its peers' waiting requests could
// fill).
//
// What may keep a request waiting is an ordered list of small rules
// (rules.go), asked in turn, the first that holds naming the Hold: the
// class's room, the rate bucket, the tenant's ceiling, its fair share
// across the tier, and a request of its tenant waiting longer at a peer.
//
// Config is what the operator sets (the router's admission flags), with
// its defaults (DefaultConfig) and its check (Validate) beside it: the
// router's flags and fleetsim's door take both from here. A Scheduler is
// built from the SchedulerConfig a Config gives (Config.Scheduler).
//
// The package is pure: it reads no clock (callers pass the time), does no
// I/O and starts no goroutine, so tests drive it step by step and the fleet
// simulator can run it on virtual time. A Scheduler is safe for concurrent
// use; every method holds its mutex for a bounded amount of work.
package admission
