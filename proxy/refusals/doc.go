// Package refusals counts and logs every request the router refuses
// before it serves it, whatever its route: a wrong key on /v1/models,
// /metrics or a path of no route used to leave no trace, so a stranger
// trying keys went unseen. A refused request of an inference route is also
// an exchange, with its line in the request log (package requestlog); the
// others get a line of their own here, at most refusalLines a second, so
// that a flood of refusals cannot flood the log: those left out are counted
// in the next line's unlogged field.
//
// Every refusal is counted in vllm_router_refusals_total, by route and
// reason. It imports no proxy: the door and the proxy's handler tell it
// what was refused.
package refusals
