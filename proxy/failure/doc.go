// Package failure is the request path's own errors: the conditions it
// branches on (sentinels, wrapped with %w and tested with errors.Is), the
// one mapping of each to an HTTP status and OpenAI error type (StatusOf),
// the error type the metrics count it under (Type), and the bodies and SSE
// events that carry it to a client in the shape of its API.
//
// It knows nothing of the exchange; every refusal, failure and cut of the
// proxy is worded here.
package failure
