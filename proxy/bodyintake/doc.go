// Package bodyintake reads request bodies within the budget of bodies the
// router holds at once (--max-buffered-body-bytes): a body is charged as it
// arrives, not as it was announced, must keep up with --min-body-rate and
// --body-read-timeout-secs, and a client over its share (--max-body-share)
// is cut when others need room (budget.go, intake.go).
//
// It knows nothing of routes, keys or admission: the proxy's door says who
// a body is charged to (Client) and how it is bounded (Limits), and gives
// its share back once the request was served.
package bodyintake
