// Package health decides, per worker, whether a router replica may send it
// traffic, from four independent kinds of evidence:
//
//   - active checks: a GET of the worker's health endpoint every Interval, in
//     parallel across workers; FailureThreshold consecutive failures mark it
//     unhealthy and SuccessThreshold consecutive successes mark it healthy again;
//   - a circuit breaker fed by request outcomes that the proxy reports through
//     an Attempt (5xx and connect errors fail, 4xx succeed);
//   - progress detection: a worker whose in-flight requests deliver nothing for
//     WedgeTimeout is wedged, and one whose per-request token rate falls far below
//     its peers' median is degraded; either verdict opens the circuit, and both
//     clear on their own when progress returns;
//   - verdicts of other replicas, carried by gossip, which keep a worker out of
//     rotation until their origin withdraws them or is forgotten.
//
// The request path (Eligible, Begin, Attempt.Progress, Attempt.End) reads
// atomics and takes at most a per-worker mutex for a few instructions; it never
// waits for the check loop, which owns no lock the request path needs. Time comes
// from an injected Clock: everything that depends on time passing (wedge and
// degrade verdicts, the breaker's open-to-half-open step) is evaluated in Tick,
// so tests advance a FakeClock and call Tick or CheckNow instead of sleeping.
//
// The package knows nothing of the router's load counters: health checks and
// verdicts never change load, and the in-flight count kept here exists only to
// tell a silent worker from an idle one.
package health
