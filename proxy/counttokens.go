package proxy

// planCountTokens is the plan of Anthropic's POST /v1/messages/count_tokens:
// the body read and checked as a generation's would be (a body the router
// cannot read is refused, not forwarded), then to the least loaded worker
// that serves its model.
//
// A count is a tokenization on the engine's API server, not a generation:
// it holds no batch slot and no KV cache, and leaves nothing cached to find
// again. So it is routed by load alone (no prefix is recorded, no decision
// judged) and takes no admission token (routes.go): the door's slots stand
// for the engines' batch, and a client's pre-flight count queued behind
// generations would wait seconds for a few milliseconds of work, and count
// against the room the door reckons from the engines' saturation.
// Anthropic's own API rate-limits counts apart from messages for the same
// reason. A count is still behind the key, --max-payload-size and
// --max-buffered-body-bytes, and metered like any route.
func (x *exchange) planCountTokens() (*leg, error) {
	if err := x.parse(); err != nil {
		return nil, err
	}
	if err := x.path.ready.await(x); err != nil {
		return nil, err
	}
	return x.leastLoadedLeg(x.in.Model)
}

// leastLoadedLeg is a leg of one attempt to the least loaded eligible
// worker that serves model (any model: ""), x begun.
func (x *exchange) leastLoadedLeg(model string) (*leg, error) {
	w, err := x.path.legs.leastLoaded(model)
	if err != nil {
		return nil, err
	}
	x.begin()
	return x.path.legs.pinnedLeg(x, w), nil
}
