package main

import (
	"context"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// traceAt returns records arriving at the given offsets, each with its own blocks and with
// block 0 shared by all.
func traceAt(offsets ...time.Duration) []workload.TraceRecord {
	records := make([]workload.TraceRecord, len(offsets))
	for i, at := range offsets {
		records[i] = workload.TraceRecord{
			Timestamp: at, InputLength: 600 + i, OutputLength: 5, HashIDs: []int64{0, int64(100 + i)},
		}
	}
	return records
}

func TestReplayStartsRequestsAtTheirScaledTimestamps(t *testing.T) {
	server := newFakeServer(t, 2)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	// Out of order on purpose: the replay goes by time.
	offsets := []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 3 * time.Second, 250 * time.Millisecond, time.Second}
	sorted := []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second}
	const scale = 10
	rep := tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
		tr.replay(ctx, start, replayPlan{records: traceAt(offsets...), rateScale: scale})
	})
	results := tr.results()
	if len(results) != len(offsets) || rep.Requests != len(offsets) || rep.Errors != 0 {
		t.Fatalf("%d results, report %d requests %d errors; want %d, none failed", len(results), rep.Requests, rep.Errors, len(offsets))
	}
	for _, r := range results {
		if want := sorted[r.id] / scale; r.dispatched != want || r.lag != 0 {
			t.Errorf("record %d started at %v (lag %v), want %v", r.id, r.dispatched, r.lag, want)
		}
	}
	if got, want := rep.DurationS, (3 * time.Second / scale).Seconds(); got != want {
		t.Errorf("duration %v s, want %v s (the virtual span)", got, want)
	}
}

func TestReplayIsOpenLoop(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(0)
	tr := newTestRun(t, server.url, newVirtualClock())
	const n = 8
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(i) * time.Second
	}
	done := make(chan report)
	go func() {
		done <- tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
			tr.replay(ctx, start, replayPlan{records: traceAt(offsets...), rateScale: 1})
		})
	}()
	// No request can finish while the server holds them: every one must have started anyway.
	waitFor(t, "all requests in flight at once", func() bool { return len(server.requests()) == n })
	server.release()
	if rep := <-done; rep.Requests != n || rep.Errors != 0 {
		t.Fatalf("report: %d requests, %d errors; want %d, 0", rep.Requests, rep.Errors, n)
	}
}

func TestReplayConcurrencyLimitBoundsRequestsInFlight(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(0)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	const n, limit = 6, 2
	done := make(chan report)
	go func() {
		done <- tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
			tr.replay(ctx, start, replayPlan{records: traceAt(make([]time.Duration, n)...), rateScale: 1, concurrencyLimit: limit})
		})
	}()
	waitFor(t, "the first requests", func() bool { return len(server.requests()) == limit })
	// A window for a broken bound to show itself, not a wait for a condition: a correct bound
	// never sends more, so there is no event to wait for. The bound is also checked exactly
	// below, by the most requests the server saw in flight at once.
	time.Sleep(50 * time.Millisecond)
	if got := len(server.requests()); got != limit {
		t.Fatalf("%d requests reached the server with %d in flight allowed", got, limit)
	}
	clock.Advance(time.Second) // the waiting requests start a second late
	server.release()
	rep := <-done
	if rep.Requests != n || server.maxInflight != limit {
		t.Fatalf("%d requests, at most %d in flight; want %d, %d", rep.Requests, server.maxInflight, n, limit)
	}
	if rep.ScheduleLagP99MS < 1000 {
		t.Fatalf("schedule lag p99 %v ms, want the second the held requests waited", rep.ScheduleLagP99MS)
	}
}

func TestReplayStopsAtTheDurationAndCancelsWhatIsInFlight(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(0)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	tr.duration = 5 * time.Second
	done := make(chan report)
	go func() {
		done <- tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
			tr.replay(ctx, start, replayPlan{records: traceAt(0, time.Second, 6*time.Second), rateScale: 1})
		})
	}()
	waitFor(t, "two requests in flight", func() bool { return len(server.requests()) == 2 })
	clock.Advance(4 * time.Second) // to the cap
	rep := <-done
	if rep.Cancelled != 2 || rep.Requests != 0 || rep.Errors != 0 || len(server.requests()) != 2 {
		t.Fatalf("report %+v after %d sent; want 2 cancelled, none finished, the third never sent", rep, len(server.requests()))
	}
	if rep.DurationS != 5 {
		t.Fatalf("duration %v s, want the 5 s cap", rep.DurationS)
	}
}

func TestReplayCancelledByTheCallerReportsWhatFinished(t *testing.T) {
	server := newFakeServer(t, 1)
	server.setHold(2)
	tr := newTestRun(t, server.url, newVirtualClock())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan report)
	go func() {
		done <- tr.execute(ctx, modeReplay, func(ctx context.Context, start time.Time) {
			tr.replay(ctx, start, replayPlan{records: traceAt(0, 0, time.Second), rateScale: 1})
		})
	}()
	waitFor(t, "two requests done and a third held", func() bool {
		return len(tr.results()) == 2 && len(server.requests()) == 3
	})
	cancel() // as Ctrl-C does
	rep := <-done
	if rep.Requests != 2 || rep.Cancelled != 1 || rep.Errors != 0 {
		t.Fatalf("report: %d requests, %d cancelled, %d errors; want 2, 1, 0", rep.Requests, rep.Cancelled, rep.Errors)
	}
}

func TestReplayMaxTokensFollowTheTraceWithinTheCap(t *testing.T) {
	plan := replayPlan{maxOutputTokens: 100}
	for _, tc := range []struct{ output, want int }{{5, 5}, {500, 100}, {0, 1}} {
		if got := plan.maxTokens(workload.TraceRecord{OutputLength: tc.output}); got != tc.want {
			t.Errorf("output_length %d: max_tokens %d, want %d", tc.output, got, tc.want)
		}
	}
	if got := (replayPlan{}).maxTokens(workload.TraceRecord{OutputLength: 5000}); got != 5000 {
		t.Errorf("uncapped max_tokens %d, want 5000", got)
	}
}

func TestReplaySendsTheSynthesisedPrompts(t *testing.T) {
	server := newFakeServer(t, 1)
	tr := newTestRun(t, server.url, newVirtualClock())
	records := traceAt(0, 0)
	tr.execute(context.Background(), modeReplay, func(ctx context.Context, start time.Time) {
		tr.replay(ctx, start, replayPlan{records: records, rateScale: 1, seed: 3})
	})
	texts := workload.NewTexts(3)
	want := map[string]bool{string(texts.Prompt(records[0])): true, string(texts.Prompt(records[1])): true}
	for _, req := range server.requests() {
		if !want[req.prompt] || req.maxTokens != 5 || req.model != "test-model" || !req.stream || !req.usage {
			t.Fatalf("server received prompt of %d bytes, max_tokens %d, model %q, stream %v, usage %v",
				len(req.prompt), req.maxTokens, req.model, req.stream, req.usage)
		}
	}
}
