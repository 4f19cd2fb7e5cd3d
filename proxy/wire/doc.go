// Package wire is what the router reads and writes of the OpenAI and
// Anthropic APIs, apart from how it serves them: the endpoints it routes
// and the fields of their bodies it reads (Endpoint), one pass over a
// body that validates it and renders its routing text, the prompt's real
// prefix in the order engines render it (Parse: routingtext.go,
// chattext.go, anthropictext.go over the scanner of jsonscan.go), the ids
// of the Responses API's stored responses (responses.go), and the shapes
// of the router's own errors on each API (errorbody.go).
//
// It does no I/O and holds no state but pools of buffers; the proxy owns
// the request path and maps errors to statuses (wire.Error carries the
// condition, not the status).
package wire
