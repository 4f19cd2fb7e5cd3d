// Package pathmetrics is the request path's metrics of one replica, under
// the reference router's names so existing dashboards keep working: the
// requests and their errors per route, the routing decisions' cache
// outcomes, retries, streams cut, resumed or preempted, the per-worker
// series and tallies, and the admission families. Each replica has its own
// metrics.Set, so tests can run several replicas in one process; the
// request path only increments series made ahead of it.
//
// It knows nothing of the proxy: the proxy hands it what a series is
// labelled with (an endpoint, a worker's URL and role, the error types it
// preinitialises) and increments the series it exposes.
package pathmetrics
