package proxy

import (
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/proxy/pathmetrics"
)

// WorkerTally is what this replica counted of one worker since it first
// routed to it (package pathmetrics counts it).
type WorkerTally = pathmetrics.WorkerTally

// countTokens adds the tokens of x's answer to the tally of the worker
// that gave it.
func countTokens(x *exchange) {
	if c := x.counters; c != nil && x.route.Tokens > 0 {
		c.CountTokens(x.route.Tokens)
	}
}

// WorkerTallies returns the tally of every worker in the current view, by
// id. It reads atomics only; safe at any time.
func (p *Proxy) WorkerTallies() map[affinity.WorkerID]WorkerTally {
	v := p.fleet.view()
	out := make(map[affinity.WorkerID]WorkerTally, len(v.members))
	for id, m := range v.members {
		if m.counters == nil {
			continue
		}
		out[id] = m.counters.Tally()
	}
	return out
}
