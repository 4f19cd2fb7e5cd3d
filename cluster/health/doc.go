// Package health decides, per worker, whether a router replica may send it
// traffic, and tells the proxy when to give up on a request, from five kinds
// of evidence:
//
//   - active checks: a GET of the worker's health endpoint every Interval, in
//     parallel across workers, and at once when a worker is added; a worker is
//     not eligible before a probe answered 2xx, FailureThreshold consecutive
//     failures mark it unhealthy and SuccessThreshold consecutive successes
//     mark it healthy again;
//   - a circuit breaker fed by request outcomes that the proxy reports through
//     an Attempt (5xx and connect errors fail, 4xx succeed);
//   - progress detection: headers, body reads, stream chunks and, while a
//     worker's requests are silent, its engine's token counters in /metrics; a
//     worker whose in-flight requests deliver nothing for WedgeTimeout is
//     wedged, and its attempts' Stuck channels close so the proxy can fail them
//     over; one whose per-request token rate, sampled while streams run, falls
//     far below its peers' median is degraded; either verdict opens the
//     circuit, and a one-token recovery probe closes it once the worker answers
//     (as fast as a peer, for a degraded one);
//   - the replica's own scheduling lag: a heartbeat that notices it woke late,
//     so that nothing seen while this replica was stalled counts against a
//     worker;
//   - verdicts of other replicas, carried by gossip, which keep a worker out of
//     rotation while a quorum of the live replicas holds them, or one does and
//     this replica's own evidence agrees.
//
// The request path (Eligible, Begin, Attempt.Progress, Attempt.Stuck,
// Attempt.End) reads atomics and takes at most a per-worker mutex for a few
// instructions; it never waits for the check loop, which owns no lock the
// request path needs. Time comes from an injected k8s.io/utils/clock
// PassiveClock: everything that
// depends on time passing (wedge and degrade verdicts, stuck attempts, the
// breaker's open-to-half-open step) is evaluated in Tick, and the network
// work that Tick asks for (engine scrapes, recovery probes) is sent by Run, so
// tests step k8s' FakeClock and call Tick, CheckNow or run the tasks instead
// of sleeping.
//
// The Monitor is a facade over three parts, in the manner of a Raft library's
// protocol object and its transport: the judge (judge.go and the files of
// each kind of evidence) reaches every verdict from the events it is handed
// and the time it is told, doing no I/O and reading no clock, so its tests
// drive it alone on virtual time; the prober (checks.go, recovery.go) sends
// active checks and recovery probes and hands the judge their answers; the
// engines' scraper (EngineScraper, engine.go) reads the engines' /metrics,
// hands the judge their progress and keeps the readings admission judges
// saturation from. The Monitor owns the clock, the loops of Run and the
// OnChange notifications.
//
// The package knows nothing of the router's load counters: health checks and
// verdicts never change load, and the in-flight count kept here exists only to
// tell a silent worker from an idle one.
package health
