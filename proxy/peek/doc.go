// Package peek looks at a socket's receive queue without consuming it: a
// client that hung up (the proxy's watch on the clients of requests in
// flight) and a pooled worker connection that received something unasked
// or was closed while idle are found without reading a byte that belongs
// to the next request or response. Where a socket cannot be looked at, the
// State is Unknown and callers do without.
package peek
