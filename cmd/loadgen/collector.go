package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// unknownWorker is the per_worker key of responses without an x-worker-id header.
const unknownWorker = "unknown"

// collector accumulates the results of a run. Per request it keeps three numbers (TTFT,
// latency, schedule lag) for the percentiles, and sums for the rest. Safe for concurrent use.
type collector struct {
	sent atomic.Int64 // requests started

	mu           sync.Mutex
	finished     int // successes and errors, not the cancelled
	errors       int
	cancelled    int
	errorsByKind map[string]int
	perWorker    map[string]int
	perTarget    []int     // finished requests by the target that took them
	ttftMS       []float64 // of successes
	latencyMS    []float64 // of successes
	lagMS        []float64 // of every started request (replay)
	tokens       tokenSums
	followUp     tokenSums // turns after the first (agentic)
	missingUsage int       // successes whose stream carried no usage
	// lines holds every finished request when keepLines is set (--requests-json).
	keepLines bool
	lines     []requestLine
}

// tokenSums adds up token counts of successful requests.
type tokenSums struct {
	prompt, cached, completion int64
}

func newCollector(targets int) *collector {
	return &collector{errorsByKind: map[string]int{}, perWorker: map[string]int{}, perTarget: make([]int, targets)}
}

// started counts a request as sent.
func (c *collector) started() { c.sent.Add(1) }

// add records the outcome of a started request.
func (c *collector) add(r result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.cancelled {
		c.cancelled++
		return
	}
	c.finished++
	if c.keepLines {
		c.lines = append(c.lines, lineOf(r))
	}
	if r.target >= 0 && r.target < len(c.perTarget) {
		c.perTarget[r.target]++
	}
	c.lagMS = append(c.lagMS, milliseconds(r.lag))
	if r.status != 0 {
		c.perWorker[workerKey(r.worker)]++
	}
	if !r.ok() {
		c.errors++
		c.errorsByKind[r.errKind]++
		return
	}
	c.ttftMS = append(c.ttftMS, milliseconds(r.ttft))
	c.latencyMS = append(c.latencyMS, milliseconds(r.latency))
	c.addTokens(r)
}

// addTokens adds the usage of a success; completion tokens fall back to the event count.
func (c *collector) addTokens(r result) {
	if r.usage == nil {
		c.missingUsage++
		c.tokens.completion += int64(r.events)
		return
	}
	sums := tokenSums{int64(r.usage.promptTokens), int64(r.usage.cachedTokens), int64(r.usage.completionTokens)}
	c.tokens.add(sums)
	if r.turn > 0 {
		c.followUp.add(sums)
	}
}

func (s *tokenSums) add(o tokenSums) {
	s.prompt += o.prompt
	s.cached += o.cached
	s.completion += o.completion
}

// progress is a snapshot for the progress line.
type progress struct {
	sent, finished, errors, cancelled int
}

// snapshot returns the counts so far.
func (c *collector) snapshot() progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	return progress{sent: int(c.sent.Load()), finished: c.finished, errors: c.errors, cancelled: c.cancelled}
}

func workerKey(worker string) string {
	if worker == "" {
		return unknownWorker
	}
	return worker
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
