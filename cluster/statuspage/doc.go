// Package statuspage is the operator's status page of a replica, served at
// /ui: plain HTML, CSS and JavaScript embedded in the binary (no build
// step), which draws the replicas, the workers and live charts of load and
// hit rate from the admin JSON endpoints (/cluster/status,
// /cluster/workers) in the operator's browser. Its charts start from the
// samples the replica kept of its last minutes (/cluster/history), so a
// page opened during an incident shows what led to it.
//
// The page holds no data itself; the endpoints it reads keep the admin
// API's rules (the bearer token, or loopback and same-site without one), so
// the page opens nothing those rules close. Its answers forbid framing and
// any script or connection beyond this origin.
package statuspage
