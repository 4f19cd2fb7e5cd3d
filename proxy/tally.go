package proxy

import "github.com/kvrouter/kvrouter/affinity"

// WorkerTally is what this replica counted of one worker since it first
// routed to it: cache outcomes of the requests it chose the worker for
// (as vllm_router_cache_hits_total counts them), and tokens generated in
// the answers the worker gave. Cumulative; rates come from two readings.
type WorkerTally struct {
	Hits, Misses, Tokens uint64
	Processed            uint64 // attempts it answered
}

// countOutcome adds a routing decision's cache outcome to its worker's
// tally; c may be nil (a proxy built without metrics).
func (c *workerCounters) countOutcome(d affinity.Decision) {
	if c == nil {
		return
	}
	if d.Hit {
		c.tally.hits.Add(1)
	} else {
		c.tally.misses.Add(1)
	}
}

// countTokens adds the tokens of x's answer to the tally of the worker
// that gave it.
func countTokens(x *exchange) {
	if c := x.counters; c != nil && x.route.Tokens > 0 {
		c.tally.tokens.Add(uint64(x.route.Tokens))
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
		t := &m.counters.tally
		out[id] = WorkerTally{Hits: t.hits.Load(), Misses: t.misses.Load(), Tokens: t.tokens.Load(),
			Processed: m.counters.processed.Get()}
	}
	return out
}
