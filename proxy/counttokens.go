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
func (p *Proxy) planCountTokens(x *exchange) (*leg, error) {
	if err := x.parse(); err != nil {
		return nil, err
	}
	if err := p.awaitReady(x); err != nil {
		return nil, err
	}
	return p.leastLoadedLeg(x, x.in.Model)
}

// leastLoadedLeg is a leg of one attempt to the least loaded eligible
// worker that serves model (any model: ""), x begun.
func (p *Proxy) leastLoadedLeg(x *exchange, model string) (*leg, error) {
	pool, err := p.fleet.view().pool(p.finalRole(), model)
	if err != nil {
		return nil, err
	}
	least := pool.At(0)
	for i := range pool.Len() {
		if l := pool.At(i); l.Merged() < least.Merged() {
			least = l
		}
	}
	p.begin(x)
	return p.pinnedLeg(x, least.ID()), nil
}
