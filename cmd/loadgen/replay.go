package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// replayPlan is what a trace replay sends, and when.
type replayPlan struct {
	records []workload.TraceRecord
	// rateScale divides the trace's time: 10 replays ten times faster. > 0.
	rateScale float64
	// maxOutputTokens caps max_tokens (a record's output_length); 0 for no cap.
	maxOutputTokens int
	// concurrencyLimit bounds the requests in flight; 0 for no bound. At the bound a request
	// waits and starts late, which the schedule lag reports.
	concurrencyLimit int
	// seed selects the family of synthesised texts (0: workload.PromptFor's).
	seed int64
}

// replay sends the plan's records open loop: each starts at its scaled offset from the first
// record, whether or not earlier ones have finished. It returns when all have finished.
func (r *run) replay(ctx context.Context, start time.Time, plan replayPlan) {
	records := slices.SortedStableFunc(slices.Values(plan.records), func(a, b workload.TraceRecord) int {
		return cmp.Compare(a.Timestamp, b.Timestamp)
	})
	if len(records) == 0 {
		return
	}
	texts := workload.NewTexts(plan.seed)
	slots := newSlots(plan.concurrencyLimit)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for i, rec := range records {
		at := scaleOffset(rec.Timestamp-records[0].Timestamp, plan.rateScale)
		if at >= r.duration || sleep(ctx, r.clock, at-r.clock.Now().Sub(start)) != nil || !slots.acquire(ctx) {
			return
		}
		dispatched := r.clock.Now().Sub(start)
		r.results.started()
		inflight.Go(func() {
			defer slots.release()
			req := workload.Request{Model: r.model, Prompt: texts.Prompt(rec), MaxTokens: plan.maxTokens(rec)}
			r.send(ctx, req, nil, result{id: i, turn: -1, dispatched: dispatched, lag: dispatched - at})
		})
	}
}

// maxTokens is the max_tokens of rec: its output length, capped, at least 1.
func (plan replayPlan) maxTokens(rec workload.TraceRecord) int {
	n := rec.OutputLength
	if plan.maxOutputTokens > 0 {
		n = min(n, plan.maxOutputTokens)
	}
	return max(n, 1)
}

// scaleOffset divides a trace offset by the rate scale.
func scaleOffset(offset time.Duration, rateScale float64) time.Duration {
	return time.Duration(float64(offset) / rateScale)
}

// slots bounds concurrency; a nil slots is unbounded.
type slots chan struct{}

func newSlots(limit int) slots {
	if limit <= 0 {
		return nil
	}
	return make(slots, limit)
}

// acquire takes a slot, waiting for one; false if ctx ended first.
func (s slots) acquire(ctx context.Context) bool {
	if s == nil {
		return ctx.Err() == nil
	}
	select {
	case s <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s slots) release() {
	if s != nil {
		<-s
	}
}
