package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/sim/workload"
)

func TestAgenticTurnsGrowAndSharePrefixesClosedLoop(t *testing.T) {
	server := newFakeServer(t, 4)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	cfg := workload.AgenticConfig{
		Sessions: 3, Turns: 4, SystemPromptTokens: 64, TaskTokens: 32,
		ObservationTokens: 48, AnswerTokens: 8, ThinkTime: time.Second, Seed: 9,
	}
	rep := tr.execute(context.Background(), modeAgentic, func(ctx context.Context, start time.Time) {
		tr.agentic(ctx, start, cfg)
	})
	if rep.Requests != 12 || rep.Errors != 0 {
		t.Fatalf("report: %d requests, %d errors; want 12, 0", rep.Requests, rep.Errors)
	}
	bySession := map[string][]fakeRequest{}
	for _, req := range server.requests() {
		bySession[req.session] = append(bySession[req.session], req)
	}
	if len(bySession) != cfg.Sessions {
		t.Fatalf("%d sessions reached the server, want %d", len(bySession), cfg.Sessions)
	}
	system := cfg.SystemPromptTokens * workload.TokenBytes
	var firstPrompts []string
	for session, turns := range bySession {
		if len(turns) != cfg.Turns {
			t.Fatalf("session %q sent %d turns, want %d", session, len(turns), cfg.Turns)
		}
		for i := 1; i < len(turns); i++ {
			// Closed loop: turn i arrives after turn i-1, and extends its prompt.
			if !strings.HasPrefix(turns[i].prompt, turns[i-1].prompt) || len(turns[i].prompt) <= len(turns[i-1].prompt) {
				t.Fatalf("session %q turn %d does not extend turn %d", session, i, i-1)
			}
		}
		firstPrompts = append(firstPrompts, turns[0].prompt)
	}
	for _, p := range firstPrompts[1:] {
		if p[:system] != firstPrompts[0][:system] || p == firstPrompts[0] {
			t.Fatal("sessions do not share exactly their system prompt")
		}
	}
	// The fake keeps a session on one worker: every later turn finds its previous prompt cached.
	if rep.FollowUpCachedTokenRatio == nil || *rep.FollowUpCachedTokenRatio < 0.5 {
		t.Fatalf("follow-up cached ratio %v, want most of the prompt", rep.FollowUpCachedTokenRatio)
	}
	if want := float64(server.cached) / float64(server.prompt); math.Abs(rep.CachedTokenRatio-want) > 1e-12 {
		t.Fatalf("cached ratio %v, the server answered %v", rep.CachedTokenRatio, want)
	}
}

func TestAgenticWaitsTheThinkTimeBetweenTurns(t *testing.T) {
	server := newFakeServer(t, 1)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	cfg := workload.AgenticConfig{Sessions: 1, Turns: 3, SystemPromptTokens: 8, TaskTokens: 8,
		ObservationTokens: 8, AnswerTokens: 2, ThinkTime: 10 * time.Second}
	tr.execute(context.Background(), modeAgentic, func(ctx context.Context, start time.Time) {
		tr.agentic(ctx, start, cfg)
	})
	sessions := workload.NewAgentic(cfg)
	sessions.Start()
	var want time.Duration
	for _, r := range tr.results() {
		if r.dispatched != want {
			t.Fatalf("turn %d sent at %v, want %v (the sum of the think times before it)", r.turn, r.dispatched, want)
		}
		next, _ := sessions.Next(0)
		want += next.Delay
	}
}

func TestAgenticStopsSessionsAtTheDuration(t *testing.T) {
	server := newFakeServer(t, 1)
	clock := newVirtualClock()
	tr := newTestRun(t, server.url, clock)
	tr.duration = 25 * time.Second
	cfg := workload.AgenticConfig{Sessions: 2, Turns: 10, SystemPromptTokens: 8, TaskTokens: 8,
		ObservationTokens: 8, AnswerTokens: 2, ThinkTime: 10 * time.Second}
	rep := tr.execute(context.Background(), modeAgentic, func(ctx context.Context, start time.Time) {
		tr.agentic(ctx, start, cfg)
	})
	// Both sessions share the virtual clock, so their think times add up: the cap comes after
	// only a few turns, far short of the 20.
	sent := len(server.requests())
	if rep.Requests == 0 || rep.Requests > sent || rep.Requests+rep.Cancelled >= 20 {
		t.Fatalf("%d requests finished, %d cancelled, %d sent; want the cap to stop the sessions early",
			rep.Requests, rep.Cancelled, sent)
	}
}
