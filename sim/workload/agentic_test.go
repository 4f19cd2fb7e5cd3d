package workload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func smallAgentic(seed int64) AgenticConfig {
	return AgenticConfig{
		Sessions: 3, Turns: 5, SystemPromptTokens: 100, TaskTokens: 50,
		ObservationTokens: 40, AnswerTokens: 20, ThinkTime: 100 * time.Millisecond, Seed: seed,
	}
}

// runSessions drives every session to its end, taking sessions in the given order each round.
func runSessions(a *Agentic, order []int) [][]Turn {
	turns := make([][]Turn, len(order))
	for _, first := range a.Start() {
		turns[first.Session] = append(turns[first.Session], first)
	}
	for progressed := true; progressed; {
		progressed = false
		for _, id := range order {
			if turn, ok := a.Next(id); ok {
				turns[id] = append(turns[id], turn)
				progressed = true
			}
		}
	}
	return turns
}

func TestAgenticTurnsExtendThePreviousPrompt(t *testing.T) {
	cfg := smallAgentic(1)
	for id, session := range runSessions(NewAgentic(cfg), []int{0, 1, 2}) {
		if len(session) != cfg.Turns {
			t.Fatalf("session %d ran %d turns, want %d", id, len(session), cfg.Turns)
		}
		for i, turn := range session {
			if turn.Session != id || turn.Index != i || turn.MaxTokens != cfg.AnswerTokens {
				t.Fatalf("session %d turn %d is labelled %+v", id, i, turn)
			}
			if i == 0 {
				if want := (cfg.SystemPromptTokens + cfg.TaskTokens) * TokenBytes; len(turn.Prompt) != want {
					t.Fatalf("first prompt has %d bytes, want %d", len(turn.Prompt), want)
				}
				continue
			}
			previous := session[i-1].Prompt
			if !bytes.HasPrefix(turn.Prompt, previous) {
				t.Fatalf("session %d turn %d does not start with the previous prompt", id, i)
			}
			grown := (len(turn.Prompt) - len(previous)) / TokenBytes
			answer := cfg.AnswerTokens
			if grown < answer+cfg.ObservationTokens/2 || grown > answer+cfg.ObservationTokens*3/2 {
				t.Fatalf("turn %d grew by %d tokens, want answer %d + observation in [%d, %d]",
					i, grown, answer, cfg.ObservationTokens/2, cfg.ObservationTokens*3/2)
			}
		}
	}
}

// A turn's pieces are its system prompt, its task, then an answer and the tool's output per turn
// before it: where a client cuts the conversation into messages.
func TestAgenticTurnsSayWhereTheirPiecesEnd(t *testing.T) {
	cfg := smallAgentic(1)
	for _, session := range runSessions(NewAgentic(cfg), []int{0, 1, 2}) {
		for i, turn := range session {
			p := turn.Pieces
			if len(p) != 2+2*i || p[0] != cfg.SystemPromptTokens*TokenBytes || p[len(p)-1] != len(turn.Prompt) {
				t.Fatalf("turn %d of %d bytes has pieces ending at %v", i, len(turn.Prompt), p)
			}
			if i > 0 && p[len(p)-2]-p[len(p)-3] != cfg.AnswerTokens*TokenBytes {
				t.Fatalf("turn %d's last answer is %d bytes, want %d", i, p[len(p)-2]-p[len(p)-3], cfg.AnswerTokens*TokenBytes)
			}
			if r := turn.Request("m"); len(r.Pieces) != len(p) {
				t.Fatalf("the request of turn %d lost its pieces", i)
			}
		}
	}
}

func TestAgenticSessionsShareOnlyTheSystemPrompt(t *testing.T) {
	cfg := smallAgentic(2)
	turns := NewAgentic(cfg).Start()
	system := cfg.SystemPromptTokens * TokenBytes
	for _, turn := range turns[1:] {
		n := commonPrefix(turns[0].Prompt, turn.Prompt)
		if n < system || n >= system+headerBytes {
			t.Fatalf("sessions 0 and %d share %d bytes, want the %d-byte system prompt", turn.Session, n, system)
		}
	}
	other := NewAgentic(smallAgentic(3)).Start()
	if n := commonPrefix(turns[0].Prompt, other[0].Prompt); n >= headerBytes {
		t.Fatalf("seeds 2 and 3 share %d bytes of system prompt", n)
	}
}

func TestAgenticIsDeterministicWhateverTheCompletionOrder(t *testing.T) {
	forward := runSessions(NewAgentic(smallAgentic(7)), []int{0, 1, 2})
	backward := runSessions(NewAgentic(smallAgentic(7)), []int{2, 1, 0})
	for id := range forward {
		for i := range forward[id] {
			a, b := forward[id][i], backward[id][i]
			if !bytes.Equal(a.Prompt, b.Prompt) || a.Delay != b.Delay {
				t.Fatalf("session %d turn %d differs with the completion order", id, i)
			}
		}
	}
}

func TestAgenticThinkTimesAreJitteredAroundTheMean(t *testing.T) {
	cfg := smallAgentic(4)
	delays := map[time.Duration]bool{}
	for _, session := range runSessions(NewAgentic(cfg), []int{0, 1, 2}) {
		if session[0].Delay != 0 {
			t.Fatalf("first turn waits %v, want 0", session[0].Delay)
		}
		for _, turn := range session[1:] {
			if turn.Delay < cfg.ThinkTime/2 || turn.Delay > cfg.ThinkTime*3/2 {
				t.Fatalf("think time %v outside [%v, %v]", turn.Delay, cfg.ThinkTime/2, cfg.ThinkTime*3/2)
			}
			delays[turn.Delay] = true
		}
	}
	if len(delays) < 2 {
		t.Fatal("every think time is the same, want jitter")
	}
}

func TestAgenticNextRefusesUnknownFinishedAndUnstartedSessions(t *testing.T) {
	a := NewAgentic(smallAgentic(5))
	if _, ok := a.Next(0); ok {
		t.Fatal("Next before Start returned a turn")
	}
	a.Start()
	for _, id := range []int{-1, 3} {
		if _, ok := a.Next(id); ok {
			t.Fatalf("Next(%d) returned a turn for a session that does not exist", id)
		}
	}
	for range 4 {
		if _, ok := a.Next(1); !ok {
			t.Fatal("session 1 ended early")
		}
	}
	if turn, ok := a.Next(1); ok {
		t.Fatalf("session 1 returned turn %d past its %d turns", turn.Index, 5)
	}
}

func TestAgenticPromptsCannotBeExtendedInPlace(t *testing.T) {
	session := runSessions(NewAgentic(smallAgentic(6)), []int{0, 1, 2})[0]
	later := make([][]byte, len(session))
	for i, turn := range session {
		later[i] = bytes.Clone(turn.Prompt)
	}
	for i, turn := range session[:len(session)-1] {
		_ = append(turn.Prompt, bytes.Repeat([]byte{'X'}, 64)...)
		for j := i + 1; j < len(session); j++ {
			if !bytes.Equal(session[j].Prompt, later[j]) {
				t.Fatalf("appending to turn %d's prompt changed turn %d's", i, j)
			}
		}
	}
}

func TestAgenticDefaultsReachTensOfThousandsOfTokens(t *testing.T) {
	a := NewAgentic(AgenticConfig{Sessions: 1})
	cfg := a.Config()
	if cfg.Turns != DefaultAgenticConfig().Turns || cfg.ThinkTime != 0 {
		t.Fatalf("defaults filled as %+v; want default turns and the zero think time kept", cfg)
	}
	last := a.Start()[0]
	for turn, ok := last, true; ok; turn, ok = a.Next(0) {
		last = turn
	}
	if tokens := len(last.Prompt) / TokenBytes; tokens < 20000 {
		t.Fatalf("the last default turn has %d tokens, want tens of thousands", tokens)
	}
}

func TestAgenticConfigValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   AgenticConfig
		field string
	}{
		{AgenticConfig{Sessions: -1}, "Sessions"},
		{AgenticConfig{AnswerTokens: -5}, "AnswerTokens"},
		{AgenticConfig{ThinkTime: -time.Second}, "ThinkTime"},
		{AgenticConfig{Turns: 1 << 20, ObservationTokens: 1 << 10}, "last turn's prompt"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("Validate(%+v) = %v, want ErrBadConfig naming %s", tc.cfg, err, tc.field)
		}
	}
	if err := DefaultAgenticConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestTurnAndRecordRequests(t *testing.T) {
	turn := NewAgentic(smallAgentic(8)).Start()[0]
	if req := turn.Request("m"); req.Model != "m" || !bytes.Equal(req.Prompt, turn.Prompt) || req.MaxTokens != 20 {
		t.Fatalf("Turn.Request = %+v", req)
	}
	rec := TraceRecord{InputLength: 10, OutputLength: 0, HashIDs: []int64{3}}
	if req := rec.Request("m"); len(req.Prompt) != 40 || req.MaxTokens != 1 {
		t.Fatalf("TraceRecord.Request = %d-byte prompt, max_tokens %d; want 40 and 1", len(req.Prompt), req.MaxTokens)
	}
}
