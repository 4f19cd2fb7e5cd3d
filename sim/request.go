package sim

import "time"

// RequestID names a request within one engine; the caller chooses it and keeps it unique among
// the engine's unfinished requests.
type RequestID uint64

// Request is one inference request as the engine sees it.
type Request struct {
	// ID identifies the request in events and in [Engine.Cancel].
	ID RequestID
	// Prompt is the routing text, rendered as the router renders it (see [RenderChat]). The
	// engine hashes it at submission and does not keep it.
	Prompt []byte
	// MaxTokens is the number of tokens to generate; the simulated model never stops early.
	// Values below 1 count as 1.
	MaxTokens int
	// StreamTokens asks for a [Token] event per generated token after the first; without it
	// only [FirstToken] and [Done] are reported, which keeps large simulations cheap.
	StreamTokens bool
	// Priority orders requests under [Config.PriorityScheduling]: lower is served first, as
	// vLLM's priority field; 0 by default, negative allowed.
	Priority int
	// RemotePrefillTokens is the number of prompt tokens whose KV arrives from a remote prefill
	// engine (prefill/decode disaggregation): they cost [Config.TransferMsPerToken] each, paid
	// alongside other work, instead of prefill compute. Tokens already cached locally are not
	// transferred. Zero for an ordinary request.
	RemotePrefillTokens int
	// Adapter is the LoRA adapter the request runs with, "" for the base
	// model; Salt its cache_salt, "" for none. Both key its blocks apart
	// from other identities' (see lora.go).
	Adapter, Salt string
	// Output, when set, appends to dst the bytes of the first n tokens the request generates.
	// The engine then caches the full blocks of the prompt followed by its output when the
	// request ends, finished or cancelled, as vLLM caches every computed block: a request that
	// continues the generation (its prompt the prompt and the text generated so far) finds them.
	// Without it only prompt blocks are cached.
	Output func(dst []byte, n int) []byte
}

// EventKind tells what an [Event] reports.
type EventKind uint8

// The kinds of [Event].
const (
	// FirstToken: the prompt is computed and the first token generated. Usage holds the prompt
	// and cached tokens and Completion 1.
	FirstToken EventKind = iota + 1
	// Token: one more token generated (only for requests with StreamTokens). Usage.Completion
	// counts the tokens generated so far.
	Token
	// Done: the request finished; Usage is final. A Done may follow a FirstToken of the same step.
	Done
)

// String names the kind for logs and test failures.
func (k EventKind) String() string {
	switch k {
	case FirstToken:
		return "first_token"
	case Token:
		return "token"
	case Done:
		return "done"
	}
	return "unknown"
}

// Usage counts a request's tokens, as reported in an OpenAI usage object.
type Usage struct {
	// Prompt is the prompt length in tokens.
	Prompt int
	// Cached is the number of prompt tokens found in the local prefix cache at admission.
	Cached int
	// Completion is the number of tokens generated so far.
	Completion int
}

// Event is something that happened to a request at a virtual instant.
type Event struct {
	ID    RequestID
	Kind  EventKind
	At    time.Duration
	Usage Usage
}
