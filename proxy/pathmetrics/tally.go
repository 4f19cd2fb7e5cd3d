package pathmetrics

import "github.com/kvrouter/kvrouter/affinity"

// WorkerTally is what this replica counted of one worker since it first
// routed to it: cache outcomes of the requests it chose the worker for
// (as vllm_router_cache_hits_total counts them), and tokens generated in
// the answers the worker gave. Cumulative; rates come from two readings.
type WorkerTally struct {
	Hits, Misses, Tokens uint64
	Processed            uint64 // attempts it answered
}

// CountOutcome adds a routing decision's cache outcome to the worker's
// tally; c may be nil (a proxy built without metrics).
func (c *WorkerCounters) CountOutcome(d affinity.Decision) {
	if c == nil {
		return
	}
	if d.Hit {
		c.tally.hits.Add(1)
	} else {
		c.tally.misses.Add(1)
	}
}

// CountTokens adds the tokens of an answer the worker gave to its tally.
func (c *WorkerCounters) CountTokens(n int) { c.tally.tokens.Add(uint64(n)) }

// Tally reads the worker's tally. It reads atomics only; safe at any
// time.
func (c *WorkerCounters) Tally() WorkerTally {
	t := &c.tally
	return WorkerTally{Hits: t.hits.Load(), Misses: t.misses.Load(), Tokens: t.tokens.Load(), Processed: c.Processed.Get()}
}
