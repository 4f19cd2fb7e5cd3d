package sim

import "time"

// sequence is a request inside the engine, from submission to its last event.
type sequence struct {
	id           RequestID
	promptTokens int
	maxTokens    int
	stream       bool
	remote       int      // tokens the request says arrive by transfer
	priority     int      // lower first, under priority scheduling
	arrival      uint64   // submission order, the tie-break of priority
	hashes       []uint64 // full prompt blocks; dropped at admission
	tokens       []uint32 // the prompt's token IDs, kept only for cache events
	adapter      string   // the LoRA adapter it runs with, "" for the base model
	salt         string   // its cache_salt

	// With Request.Output: what the output's blocks continue.
	output       func(dst []byte, n int) []byte
	tail         []byte // the prompt past its last full block
	promptBlocks int    // the prompt's full blocks

	admitted    bool
	cancelled   bool
	finished    bool
	blocks      []int32 // indexed blocks referenced, prompt order
	marked      int     // leading blocks marked computed
	private     int     // blocks held outside the index
	cached      int     // prompt tokens found cached at admission
	kvTokens    int     // prompt tokens whose KV is present
	transfer    int     // tokens still arriving from a remote engine
	readyAt     time.Duration
	prefillLeft int
	generated   int
	chunk       int // prefill tokens in the current step; 0 means a decode
}

func newSequence(cfg Config, r Request) *sequence {
	s := &sequence{
		id:           r.ID,
		promptTokens: cfg.TokenCount(len(r.Prompt)),
		maxTokens:    max(r.MaxTokens, 1),
		stream:       r.StreamTokens,
		remote:       max(r.RemotePrefillTokens, 0),
		priority:     r.Priority,
		hashes:       cfg.appendBlockHashesFrom(nil, identitySeed(r.Adapter, r.Salt), r.Prompt),
		tokens:       promptTokens(cfg, r.Prompt),
		adapter:      r.Adapter,
		salt:         r.Salt,
	}
	if r.Output != nil {
		s.output = r.Output
		s.promptBlocks = len(s.hashes)
		s.tail = append([]byte(nil), r.Prompt[len(r.Prompt)/cfg.BlockBytes()*cfg.BlockBytes():]...)
	}
	return s
}

func promptTokens(cfg Config, prompt []byte) []uint32 {
	if !cfg.CacheEvents {
		return nil
	}
	return cfg.Tokens(nil, prompt)
}

func (s *sequence) usage() Usage {
	return Usage{Prompt: s.promptTokens, Cached: s.cached, Completion: s.generated}
}

// before reports whether s goes before o under priority scheduling.
func (s *sequence) before(o *sequence) bool {
	if s.priority != o.priority {
		return s.priority < o.priority
	}
	return s.arrival < o.arrival
}

// ready reports whether the sequence can compute at time at, absorbing a completed transfer.
func (s *sequence) ready(at time.Duration) bool {
	if s.readyAt > at {
		return false
	}
	if s.transfer > 0 {
		s.kvTokens += s.transfer
		s.transfer = 0
	}
	return true
}
