// Package catalog is what the workers serve, as their OpenAI-compatible
// /v1/models lists say: the models of one worker (Served, read by Parse)
// and the router's own GET /v1/models answer, the union over the fleet
// (ListBody).
//
// It knows nothing of the fleet or of HTTP clients: the proxy asks the
// workers and keeps what they answered.
package catalog
