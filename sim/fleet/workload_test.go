package fleet

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

func TestTraceArrivesInOrderAtScaledTimestamps(t *testing.T) {
	records := []workload.TraceRecord{
		{Timestamp: 0, InputLength: 10, OutputLength: 0, HashIDs: []int64{1}},
		{Timestamp: 4 * time.Second, InputLength: 600, OutputLength: 7, HashIDs: []int64{1, 2}},
	}
	tr := NewTrace(records, 2)
	first := tr.Start()
	if len(first) != 1 || first[0].At != 0 || first[0].MaxTokens != 1 || first[0].Session != -1 {
		t.Fatalf("start %+v, want one arrival at 0 with max_tokens 1", first)
	}
	second, ok := tr.Arrived(first[0])
	if !ok || second.At != 2*time.Second || len(second.Prompt) != 600*workload.TokenBytes || second.MaxTokens != 7 {
		t.Fatalf("second arrival at %v with %d bytes and max_tokens %d, want 2s, 2400, 7", second.At, len(second.Prompt), second.MaxTokens)
	}
	if !bytes.HasPrefix(second.Prompt, first[0].Prompt) {
		t.Error("records sharing block 1 do not share a prefix")
	}
	if _, ok := tr.Arrived(second); ok {
		t.Error("an arrival after the last record")
	}
	if _, ok := tr.Completed(second, time.Hour); ok {
		t.Error("a trace sent a closed-loop follow-up")
	}
}

func TestGroupsShareTheirOwnSystemPromptOnly(t *testing.T) {
	cfg := workload.AgenticConfig{Sessions: 5, Turns: 2, SystemPromptTokens: 64, TaskTokens: 16, ObservationTokens: 16, AnswerTokens: 4, Seed: 9}
	a, err := NewAgenticGroups(cfg, Groups{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	start := a.Start()
	if len(start) != 5 {
		t.Fatalf("%d first turns, want 5", len(start))
	}
	system := cfg.SystemPromptTokens * workload.TokenBytes
	for i, arr := range start {
		if arr.Session != i {
			t.Errorf("arrival %d is session %d", i, arr.Session)
		}
	}
	// Sessions 0-2 are group 0, 3-4 group 1.
	if !bytes.Equal(start[0].Prompt[:system], start[2].Prompt[:system]) {
		t.Error("sessions of one group do not share the system prompt")
	}
	if bytes.Equal(start[0].Prompt[:system], start[3].Prompt[:system]) {
		t.Error("sessions of different groups share the system prompt")
	}
	next, ok := a.Completed(start[4], time.Second)
	if !ok || next.Session != 4 || !bytes.HasPrefix(next.Prompt, start[4].Prompt) || next.At < time.Second {
		t.Errorf("session 4's next turn: session %d at %v, extends its prompt %v", next.Session, next.At, bytes.HasPrefix(next.Prompt, start[4].Prompt))
	}
	if _, ok := a.Completed(next, 2*time.Second); ok {
		t.Error("a third turn of a two-turn session")
	}
}

func TestObservationSpreadMakesGroupsUnequal(t *testing.T) {
	cfg := workload.AgenticConfig{Sessions: 8, Turns: 2, SystemPromptTokens: 64, TaskTokens: 16, ObservationTokens: 256, AnswerTokens: 4, Seed: 9}
	lengths := func(spread float64) map[int]bool {
		a, err := NewAgenticGroups(cfg, Groups{Count: 8, ObservationSpread: spread})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, arr := range a.Start() {
			next, _ := a.Completed(arr, 0)
			seen[(len(next.Prompt)-len(arr.Prompt))/(cfg.ObservationTokens*workload.TokenBytes/2)] = true
		}
		return seen
	}
	if even, spread := lengths(0), lengths(1.5); len(spread) <= len(even) {
		t.Errorf("observation sizes fall in %d bands with spread and %d without: want more with", len(spread), len(even))
	}
}

func TestBadGroupsAreRefused(t *testing.T) {
	cfg := workload.AgenticConfig{Sessions: 2}
	for _, g := range []Groups{{Count: 3}, {Count: 1, ObservationSpread: -1}} {
		if _, err := NewAgenticGroups(cfg, g); !errors.Is(err, workload.ErrBadConfig) {
			t.Errorf("%+v: error %v, want ErrBadConfig", g, err)
		}
	}
}
