package requestlog

import (
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/core"
)

// Route is what the request log says of a request's routing: the decision
// of its final leg's first attempt, and every attempt of every leg. The
// exchange that owns it writes it from its own goroutines in turn, never
// at once.
type Route struct {
	Decision affinity.Decision
	Decided  bool
	// Fact and Via are what the replica knew of the prefix and who chose
	// the worker, when Judged says the decider routed it on the prefix.
	Fact     core.Fact
	Via      core.Via
	Judged   bool
	Attempts int
	Worker   affinity.WorkerID // the worker whose answer the client got
	Prefill  affinity.WorkerID // the prefill worker of a disaggregated request
	Tokens   int               // generated tokens, as the answer or the stream said
	// Usage is the prompt's tokens and how many the engine found cached, as
	// its answer said (the last engine's, for a stream that resumed).
	Usage core.Usage
	// Streamed are the workers a stream that may resume used, in order;
	// more than one when it resumed.
	Streamed []affinity.WorkerID
	// TookBack: the exchange asked a borrower to give way (preemption);
	// Preempted: the times its stream gave way.
	TookBack  bool
	Preempted int
}

// NoteStreamed records that the stream used worker w.
func (rt *Route) NoteStreamed(w affinity.WorkerID) {
	if n := len(rt.Streamed); n == 0 || rt.Streamed[n-1] != w {
		rt.Streamed = append(rt.Streamed, w)
	}
}

// streamedWorkers is the log's list of the workers a stream used, when it
// used more than one.
func (rt *Route) streamedWorkers() string {
	var b strings.Builder
	for i, w := range rt.Streamed {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(w), 10))
	}
	return b.String()
}

// DecisionName is how the log and the trace name a decision's cache
// outcome.
func DecisionName(d affinity.Decision) string {
	switch {
	case d.Hit:
		return "hit"
	case d.Shed:
		return "shed"
	}
	return "miss"
}
