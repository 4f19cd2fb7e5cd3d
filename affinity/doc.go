// Package affinity decides which worker a request goes to.
//
// It holds the pure core of the router: the chained block hashes of a
// request's routing text, the ownership index that remembers which worker
// holds which prefix blocks (with a per-worker LRU budget), the per-worker
// in-flight counters with their release-once guards, the selection
// policies, among them cache_aware with the per-request overload check, and
// the residency of LoRA adapters that narrows an adapter request's
// candidates before its policy chooses.
//
// The package imports nothing else of this project and reads time only from
// an injected k8s.io/utils/clock PassiveClock, so the same code runs inside a
// router replica and inside the fleet simulator on virtual time.
package affinity
