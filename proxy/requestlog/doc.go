// Package requestlog is the request log: one structured line per request,
// at INFO on the replica's logger (JSON with --log-json), for operators who
// follow one request: its id, model, how it was routed (Route), where it
// went, how long its first token and the whole took, and how it ended.
//
// It knows nothing of the exchange that fills a Route and hands its Entry
// over when it ends; the proxy's recorder writes the line, once, from
// exchange.finish.
package requestlog
