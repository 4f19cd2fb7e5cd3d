package sim

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrDuplicateRequest is returned by [Engine.Submit] for an ID already unfinished there.
	ErrDuplicateRequest = errors.New("sim: duplicate request id")
	// ErrRequestTooLarge is returned by [Engine.Submit] for a request whose prompt and
	// generation could never fit in the KV cache, even empty (vLLM refuses those too).
	ErrRequestTooLarge = errors.New("sim: request exceeds KV capacity")
)

// Engine is one simulated inference engine: a waiting queue, the running batch and the KV cache,
// advanced over virtual time by its caller. Times are durations since an epoch the caller picks;
// they must not go backwards. Not safe for concurrent use.
type Engine struct {
	cfg  Config
	kv   kvManager
	byID map[RequestID]*sequence

	waiting waitQueue
	running runningSet

	batch    stepBatch
	lora     loraSlots
	stepping bool
	stepEnd  time.Duration
	waking   bool // idle until a KV transfer completes at wakeAt
	wakeAt   time.Duration
	now      time.Duration

	events         []Event
	computedTokens uint64
	generated      uint64
	arrivals       uint64
}

// NewEngine returns an idle engine with an empty cache. Zero fields of cfg take their defaults;
// it panics if the result is invalid, since a simulation cannot run on it (check with
// [Config.Validate] first when the config comes from a user).
func NewEngine(cfg Config) *Engine {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	e := &Engine{
		cfg:     cfg,
		byID:    make(map[RequestID]*sequence),
		waiting: waitQueue{byPriority: cfg.PriorityScheduling},
		lora:    newLoRASlots(),
	}
	e.kv = kvManager{cfg: &e.cfg, cache: newPrefixCache(cfg.KVCapacityTokens / cfg.BlockTokens)}
	if cfg.CacheEvents {
		e.kv.cache.log = &e.kv.log
	}
	return e
}

// Config returns the engine's configuration, defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// SetSlowdown changes the slowdown factor from the next step on (the "degrade" fault).
func (e *Engine) SetSlowdown(f float64) error {
	if err := ValidateSlowdown(f); err != nil {
		return err
	}
	e.cfg.Slowdown = f
	return nil
}

// Submit queues a request at virtual time now. Call [Engine.Advance] up to now first, so that
// the engine's notion of now is current. The engine keeps nothing of r.Prompt.
func (e *Engine) Submit(r Request, now time.Duration) error {
	if _, dup := e.byID[r.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicateRequest, r.ID)
	}
	s := newSequence(e.cfg, r)
	if limit := e.kv.cache.capacity * e.cfg.BlockTokens; s.promptTokens > limit || s.maxTokens > limit ||
		e.cfg.BlocksFor(s.promptTokens+s.maxTokens) > e.kv.cache.capacity {
		return fmt.Errorf("%w: %d prompt and %d generated tokens, capacity %d tokens",
			ErrRequestTooLarge, s.promptTokens, s.maxTokens, limit)
	}
	e.byID[r.ID] = s
	e.arrivals++
	s.arrival = e.arrivals
	countAdapter(e.lora.waiting, s.adapter, 1)
	e.waiting.push(s)
	e.kick(now)
	return nil
}

// Cancel drops a request, waiting or running, at virtual time now: it produces no more events
// and its KV blocks are released at once (computed prompt blocks stay cached). The step in
// progress keeps its duration. Reports whether the request was unfinished.
func (e *Engine) Cancel(id RequestID, now time.Duration) bool {
	s, ok := e.byID[id]
	if !ok {
		return false
	}
	delete(e.byID, id)
	s.cancelled = true
	if s.admitted {
		countAdapter(e.lora.running, s.adapter, -1)
		e.kv.release(s)
		e.running.remove(s)
	} else {
		e.waiting.cancelled()
		countAdapter(e.lora.waiting, s.adapter, -1)
	}
	e.kick(now)
	return true
}

// Progress is the usage so far of a request the engine holds, waiting or running: what its
// stream showed up to now (Completion counts the tokens generated). False when the engine holds
// no such request (never submitted, finished or cancelled). It changes nothing.
func (e *Engine) Progress(id RequestID) (Usage, bool) {
	s, ok := e.byID[id]
	if !ok {
		return Usage{}, false
	}
	return s.usage(), true
}

// NextEventAt is the virtual time at which the engine next changes state (a step ends or a KV
// transfer completes), and false when it is idle until the next Submit.
func (e *Engine) NextEventAt() (time.Duration, bool) {
	switch {
	case e.stepping:
		return e.stepEnd, true
	case e.waking:
		return e.wakeAt, true
	}
	return 0, false
}

// Advance runs every step that ends at or before now and returns the events they produced, in
// time order. The returned slice is reused by the next call to Advance.
func (e *Engine) Advance(now time.Duration) []Event {
	e.events = e.events[:0]
	for {
		if e.stepping && e.stepEnd <= now {
			at := e.stepEnd
			e.finishStep(at)
			e.startStep(at)
			continue
		}
		if !e.stepping && e.waking && e.wakeAt <= now {
			e.startStep(e.wakeAt)
			continue
		}
		break
	}
	e.now = max(e.now, now)
	return e.events
}

// Running is the number of admitted, unfinished requests (vllm:num_requests_running).
func (e *Engine) Running() int { return len(e.running.seqs) }

// Waiting is the number of queued requests not admitted yet (vllm:num_requests_waiting).
func (e *Engine) Waiting() int { return e.waiting.live }

// KVUsage is the fraction (0..1) of KV blocks held by running requests; cached blocks that
// nothing references count as free, as in vllm:kv_cache_usage_perc.
func (e *Engine) KVUsage() float64 {
	return float64(e.kv.cache.usedBlocks()) / float64(e.kv.cache.capacity)
}

// PrefixQueries is the number of prompt tokens looked up in the prefix cache so far (monotonic,
// vllm:prefix_cache_queries_total).
func (e *Engine) PrefixQueries() uint64 { return e.kv.prefixQueries }

// PrefixHits is the number of looked-up prompt tokens found cached so far (monotonic,
// vllm:prefix_cache_hits_total).
func (e *Engine) PrefixHits() uint64 { return e.kv.prefixHits }

// ComputedTokens is the number of prompt tokens prefilled locally so far (monotonic): the
// uncached tokens that cost compute.
func (e *Engine) ComputedTokens() uint64 { return e.computedTokens }

// GeneratedTokens is the number of tokens generated so far, counted at every engine step,
// cancelled requests' included (monotonic, vllm:generation_tokens_total).
func (e *Engine) GeneratedTokens() uint64 { return e.generated }

// Preemptions is the number of running requests preempted so far (vllm:num_preemptions_total):
// always 0, since vLLM preempts only a running request that cannot grow its KV and this engine
// reserves a sequence's KV for its whole life at admission (see [Config.PriorityScheduling]).
func (e *Engine) Preemptions() uint64 { return 0 }

// TransferredTokens is the number of prompt tokens whose KV was fetched from a remote prefill
// engine so far (monotonic), counted when the transfer starts.
func (e *Engine) TransferredTokens() uint64 { return e.kv.transferTokens }

// NumGPUBlocks is the KV capacity in blocks (vllm:cache_config_info's num_gpu_blocks).
func (e *Engine) NumGPUBlocks() int { return e.kv.cache.capacity }

// CachedBlocks is the number of blocks indexed by hash, referenced or not.
func (e *Engine) CachedBlocks() int { return len(e.kv.cache.index) }

// CachedTokens is the number of tokens of prompt that would be found cached if it were admitted
// now. It changes nothing.
func (e *Engine) CachedTokens(prompt []byte) int { return e.kv.cachedTokens(prompt) }

// kick starts a step at now when the engine is not already in one.
func (e *Engine) kick(now time.Duration) {
	if !e.stepping {
		e.startStep(max(now, e.now))
	}
}

func (e *Engine) emit(s *sequence, kind EventKind, at time.Duration) {
	e.events = append(e.events, Event{ID: s.id, Kind: kind, At: at, Usage: s.usage()})
}
