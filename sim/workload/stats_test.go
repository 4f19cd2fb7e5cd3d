package workload

import (
	"math"
	"testing"
	"time"
)

func TestStatsCountsRepeatedBlocksAndTokens(t *testing.T) {
	records := []TraceRecord{
		{Timestamp: 2 * time.Second, InputLength: 1000, OutputLength: 10, HashIDs: []int64{0, 1}},
		// Repeats 0 (512 tokens) and 1; block 1 was cut at 488 tokens before, and is 512 now:
		// only the 488 tokens both have are hits.
		{Timestamp: 5 * time.Second, InputLength: 1100, OutputLength: 20, HashIDs: []int64{0, 1, 2}},
		// Repeats 0 and 1 (cut at 100 tokens this time).
		{Timestamp: 3 * time.Second, InputLength: 612, OutputLength: 30, HashIDs: []int64{0, 1}},
	}
	got := Stats(records)
	want := TraceStats{
		Requests: 3, Duration: 3 * time.Second, InputTokens: 2712, OutputTokens: 60,
		Blocks: 7, RepeatedBlocks: 4, BlockHitRate: 4.0 / 7,
		TokenHitRate: float64(512+488+512+100) / 2712,
	}
	if got != want {
		t.Fatalf("Stats = %+v\nwant    %+v", got, want)
	}
	if empty := Stats(nil); empty != (TraceStats{}) {
		t.Fatalf("Stats(nil) = %+v, want zero", empty)
	}
}

// The trace README's figures: 12,031 requests over 58.9 minutes, an infinite cache hits 36.6% of
// blocks and 37.4% of tokens.
func TestStatsReproduceTheConversationTraceFigures(t *testing.T) {
	s := Stats(loadSharedTrace(t, "mooncake_conversation_trace.jsonl", 0))
	if s.Requests != 12031 {
		t.Errorf("requests = %d, want 12031", s.Requests)
	}
	if minutes := s.Duration.Minutes(); math.Abs(minutes-58.9) > 0.05 {
		t.Errorf("duration = %.2f min, want 58.9", minutes)
	}
	if math.Abs(s.BlockHitRate-0.366) > 0.0005 {
		t.Errorf("block hit rate = %.4f, want 0.366", s.BlockHitRate)
	}
	if math.Abs(s.TokenHitRate-0.374) > 0.0005 {
		t.Errorf("token hit rate = %.4f, want 0.374", s.TokenHitRate)
	}
}
