package workload

import (
	"errors"
	"fmt"
	"time"
)

// ErrBadConfig marks an invalid AgenticConfig.
var ErrBadConfig = errors.New("invalid agentic config")

// AgenticConfig shapes agentic sessions: concurrent rollouts whose every turn resends the whole
// conversation so far (system prompt, task, then each answer and tool observation). Zero fields
// take the defaults of DefaultAgenticConfig, except ThinkTime and Seed, whose zero is meaningful.
type AgenticConfig struct {
	// Sessions is the number of concurrent sessions (rollouts). Default 32.
	Sessions int
	// Turns is the number of requests per session. Default 20.
	Turns int
	// SystemPromptTokens is the length of the system prompt that every session starts with, the
	// same text for all of them. Default 2048.
	SystemPromptTokens int
	// TaskTokens is the length of each session's own task statement, after the system prompt.
	// Default 1024.
	TaskTokens int
	// ObservationTokens is the mean length of the tool output appended after each answer; each
	// observation draws its length uniformly from [1/2, 3/2] of it. Default 1024.
	ObservationTokens int
	// AnswerTokens is max_tokens of every turn, and the length of the synthetic answer that the
	// next turn's prompt carries. Default 256.
	AnswerTokens int
	// ThinkTime is the mean tool latency between a turn's completion and the next turn; each
	// delay draws uniformly from [1/2, 3/2] of it. Zero sends the next turn at once.
	ThinkTime time.Duration
	// Seed selects the texts and the random draws. Zero is a seed like any other.
	Seed int64
}

// DefaultAgenticConfig returns the defaults. With them the last turn's prompt is about 30k tokens.
func DefaultAgenticConfig() AgenticConfig {
	return AgenticConfig{
		Sessions:           32,
		Turns:              20,
		SystemPromptTokens: 2048,
		TaskTokens:         1024,
		ObservationTokens:  1024,
		AnswerTokens:       256,
		ThinkTime:          time.Second,
	}
}

// withDefaults fills the zero fields that have defaults.
func (c AgenticConfig) withDefaults() AgenticConfig {
	d := DefaultAgenticConfig()
	for _, f := range []struct {
		field *int
		def   int
	}{
		{&c.Sessions, d.Sessions}, {&c.Turns, d.Turns}, {&c.SystemPromptTokens, d.SystemPromptTokens},
		{&c.TaskTokens, d.TaskTokens}, {&c.ObservationTokens, d.ObservationTokens},
		{&c.AnswerTokens, d.AnswerTokens},
	} {
		if *f.field == 0 {
			*f.field = f.def
		}
	}
	return c
}

// maxAgenticPromptTokens bounds the longest prompt a configuration may produce (64 MiB of text).
const maxAgenticPromptTokens = MaxInputTokens

// Validate reports the first invalid field (after defaults), naming it, wrapped in ErrBadConfig.
func (c AgenticConfig) Validate() error {
	c = c.withDefaults()
	for _, f := range []struct {
		name  string
		value int
	}{
		{"Sessions", c.Sessions}, {"Turns", c.Turns}, {"SystemPromptTokens", c.SystemPromptTokens},
		{"TaskTokens", c.TaskTokens}, {"ObservationTokens", c.ObservationTokens},
		{"AnswerTokens", c.AnswerTokens},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is %d, want > 0", ErrBadConfig, f.name, f.value)
		}
	}
	if c.ThinkTime < 0 {
		return fmt.Errorf("%w: ThinkTime is %v, want >= 0", ErrBadConfig, c.ThinkTime)
	}
	if longest := c.longestPromptTokens(); longest > maxAgenticPromptTokens {
		return fmt.Errorf("%w: the last turn's prompt would reach %d tokens, over %d",
			ErrBadConfig, longest, maxAgenticPromptTokens)
	}
	return nil
}

// longestPromptTokens is an upper bound of the last turn's prompt length.
func (c AgenticConfig) longestPromptTokens() int64 {
	perTurn := int64(c.AnswerTokens) + int64(c.ObservationTokens)*3/2 + 1
	return int64(c.SystemPromptTokens) + int64(c.TaskTokens) + int64(c.Turns-1)*perTurn
}

// Turn is one request of an agentic session.
type Turn struct {
	Session int // session number, in [0, Sessions)
	Index   int // turn number within the session, from 0
	// Prompt is the whole conversation so far. It is shared with the session's later prompts:
	// treat it as read-only (its capacity is capped, so appending to it copies).
	Prompt []byte
	// MaxTokens is the max_tokens of the request (AgenticConfig.AnswerTokens).
	MaxTokens int
	// Pieces are where the pieces of Prompt end: the system prompt, the task, then each earlier
	// turn's answer and the tool output that followed it. Shared like Prompt: read-only.
	Pieces []int
	// Delay is the tool latency to wait after the previous turn completed before sending this
	// one; zero for a session's first turn.
	Delay time.Duration
}

// Request returns the request of t for the given model.
func (t Turn) Request(model string) Request {
	return Request{Model: model, Prompt: t.Prompt, MaxTokens: t.MaxTokens, Pieces: t.Pieces}
}

// Agentic generates the turns of closed-loop agentic sessions: a session's next turn exists only
// once its previous one completed, so the caller drives the loop. Start, then Next per session.
//
// Concurrency: Start must return before any Next. Next may run concurrently for different
// sessions, never for the same session.
type Agentic struct {
	cfg      AgenticConfig
	system   []byte
	sessions []agenticSession
}

// agenticSession is the state of one session, touched only by Start and that session's Next.
type agenticSession struct {
	conversation []byte   // every prompt of the session is a prefix of it
	pieces       []int    // where each piece of the conversation ends in it (Turn.Pieces)
	next         int      // index of the turn Next returns
	random       splitmix // draws of observation lengths and think times
}

// Text kinds, mixed into text keys so that no two pieces of a session share a key.
const (
	kindSystem uint64 = iota + 1
	kindTask
	kindAnswer
	kindObservation
	kindRandom
)

// NewAgentic returns the sessions of cfg. Zero fields take their defaults; it panics on a
// configuration that Validate refuses.
func NewAgentic(cfg AgenticConfig) *Agentic {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	a := &Agentic{cfg: cfg, sessions: make([]agenticSession, cfg.Sessions)}
	a.system = a.appendText(nil, kindSystem, 0, 0, cfg.SystemPromptTokens)
	return a
}

// Config returns the configuration in use, defaults filled in.
func (a *Agentic) Config() AgenticConfig { return a.cfg }

// Start returns the first turn of every session, in session order, and (re)starts them all.
func (a *Agentic) Start() []Turn {
	turns := make([]Turn, len(a.sessions))
	for id := range a.sessions {
		s := &a.sessions[id]
		s.random = splitmix{state: a.textKey(kindRandom, id, 0)}
		s.conversation = append([]byte(nil), a.system...)
		s.pieces = []int{len(s.conversation)}
		s.conversation = a.appendText(s.conversation, kindTask, id, 0, a.cfg.TaskTokens)
		s.pieces = append(s.pieces, len(s.conversation))
		s.next = 1
		turns[id] = a.turn(id, 0, 0)
	}
	return turns
}

// Next returns the next turn of session id, to be called once its previous turn completed.
// It reports false when the session has run all its turns, or id is not a session.
func (a *Agentic) Next(id int) (Turn, bool) {
	if id < 0 || id >= len(a.sessions) {
		return Turn{}, false
	}
	s := &a.sessions[id]
	if s.next == 0 || s.next >= a.cfg.Turns {
		return Turn{}, false
	}
	index := s.next
	s.next++
	s.conversation = a.appendText(s.conversation, kindAnswer, id, index-1, a.cfg.AnswerTokens)
	s.pieces = append(s.pieces, len(s.conversation))
	observationTokens := jitter(&s.random, a.cfg.ObservationTokens)
	s.conversation = a.appendText(s.conversation, kindObservation, id, index-1, observationTokens)
	s.pieces = append(s.pieces, len(s.conversation))
	delay := time.Duration(jitter(&s.random, int(a.cfg.ThinkTime)))
	return a.turn(id, index, delay), true
}

// turn wraps the session's conversation so far as a Turn.
func (a *Agentic) turn(id, index int, delay time.Duration) Turn {
	conversation, pieces := a.sessions[id].conversation, a.sessions[id].pieces
	return Turn{
		Session:   id,
		Index:     index,
		Prompt:    conversation[:len(conversation):len(conversation)],
		Pieces:    pieces[:len(pieces):len(pieces)],
		MaxTokens: a.cfg.AnswerTokens,
		Delay:     delay,
	}
}

// appendText appends the piece of the given kind of a session's turn, tokens long. Bytes past
// the end of earlier prompts are written, never bytes within them.
func (a *Agentic) appendText(dst []byte, kind uint64, session, turn, tokens int) []byte {
	return appendText(dst, a.textKey(kind, session, turn), tokens*TokenBytes)
}

// textKey derives the key of a piece of text from the seed and the piece's coordinates.
func (a *Agentic) textKey(kind uint64, session, turn int) uint64 {
	key := mix64(uint64(a.cfg.Seed) ^ kind<<56)
	key = mix64(key ^ uint64(session))
	return mix64(key ^ uint64(turn))
}

// jitter draws uniformly from [mean/2, mean*3/2].
func jitter(random *splitmix, mean int) int {
	if mean <= 1 {
		return mean
	}
	return mean/2 + int(random.next()%uint64(mean+1))
}
