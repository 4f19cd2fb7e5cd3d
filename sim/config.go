package sim

import (
	"errors"
	"fmt"
	"math"
)

// Config describes one engine's capacity and timing. A zero field takes its default (see
// [DefaultConfig]); [Config.Validate] refuses values that cannot describe an engine.
type Config struct {
	// KVCapacityTokens is the KV cache size in tokens, shared by running sequences and the
	// prefix cache. Default 262144. Rounded down to whole blocks.
	KVCapacityTokens int
	// BlockTokens is the number of tokens per KV block, the unit of caching and hashing.
	// Default 16, like vLLM.
	BlockTokens int
	// BytesPerToken approximates tokenisation: a text of n bytes is ceil(n/BytesPerToken)
	// tokens. Default 4.
	BytesPerToken int
	// MaxNumSeqs bounds the sequences running at once (vLLM's --max-num-seqs). Default 256.
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one step, decode tokens included; prefills are
	// chunked to fit (vLLM's --max-num-batched-tokens). Default 8192.
	MaxBatchedTokens int

	// PrefillQuadMs, PrefillLinearMs and PrefillBaseMs give the prefill cost of a step computing T
	// new (uncached) tokens: PrefillQuadMs*T^2 + PrefillLinearMs*T + PrefillBaseMs milliseconds.
	// Defaults 4.21e-7, 0.01518 and 16.5 (a 32B model on an H100-class GPU).
	PrefillQuadMs   float64
	PrefillLinearMs float64
	PrefillBaseMs   float64
	// DecodeEmptyMs and DecodeFullMs are the duration of a decode step with an empty and a full KV
	// cache; usage in between interpolates linearly. Defaults 5.7 and 34.
	DecodeEmptyMs float64
	DecodeFullMs  float64
	// TransferMsPerToken is the time to receive one token of KV from a remote prefill engine
	// (prefill/decode disaggregation). Transfers run alongside steps. Default 0.002.
	TransferMsPerToken float64
	// Slowdown multiplies every step's duration: 1 is a healthy engine, 10 one that runs ten
	// times slower (the "degrade" fault). Default 1.
	Slowdown float64

	// PriorityScheduling is vLLM's --scheduling-policy priority, as its v1 scheduler runs it:
	// requests wait in order of [Request.Priority] (lower first), then of arrival, and the
	// first waiting request takes the next sequence slot or KV that frees. A waiting request
	// never preempts a running one, whatever its priority: vLLM v1 stops admitting when
	// max_num_seqs run or the KV does not fit, and preempts only a running request that cannot
	// grow its KV (the running request of the lowest priority goes back to waiting), which
	// cannot happen here since this engine reserves a sequence's KV for its whole life at
	// admission. Off: first come, first served, and Priority is ignored.
	PriorityScheduling bool

	// MaxLoras is how many LoRA adapters the engine holds in its slots, and
	// runs in one batch (vLLM's --max-loras); 0 bounds neither. Default 0.
	MaxLoras int
	// LoraSwapMs is the time a step takes longer for each adapter it loads
	// into a slot. Default 0.
	LoraSwapMs float64

	// CacheEvents makes the engine log every change of its prefix cache (blocks computed and
	// cached, blocks evicted) for [Engine.TakeCacheEvents]: what vLLM publishes as KV events.
	// Off by default, which keeps large simulations from holding prompts' tokens.
	CacheEvents bool
}

// Defaults of [Config]; see the field docs.
const (
	DefaultKVCapacityTokens   = 262144
	DefaultBlockTokens        = 16
	DefaultBytesPerToken      = 4
	DefaultMaxNumSeqs         = 256
	DefaultMaxBatchedTokens   = 8192
	DefaultPrefillQuadMs      = 4.21e-7
	DefaultPrefillLinearMs    = 0.01518
	DefaultPrefillBaseMs      = 16.5
	DefaultDecodeEmptyMs      = 5.7
	DefaultDecodeFullMs       = 34
	DefaultTransferMsPerToken = 0.002
)

// ErrInvalidConfig is wrapped by every error [Config.Validate] returns.
var ErrInvalidConfig = errors.New("sim: invalid config")

// DefaultConfig returns a Config with every field at its default.
func DefaultConfig() Config {
	return Config{}.WithDefaults()
}

// WithDefaults returns c with every zero field replaced by its default.
func (c Config) WithDefaults() Config {
	setInt(&c.KVCapacityTokens, DefaultKVCapacityTokens)
	setInt(&c.BlockTokens, DefaultBlockTokens)
	setInt(&c.BytesPerToken, DefaultBytesPerToken)
	setInt(&c.MaxNumSeqs, DefaultMaxNumSeqs)
	setInt(&c.MaxBatchedTokens, DefaultMaxBatchedTokens)
	setFloat(&c.PrefillQuadMs, DefaultPrefillQuadMs)
	setFloat(&c.PrefillLinearMs, DefaultPrefillLinearMs)
	setFloat(&c.PrefillBaseMs, DefaultPrefillBaseMs)
	setFloat(&c.DecodeEmptyMs, DefaultDecodeEmptyMs)
	setFloat(&c.DecodeFullMs, DefaultDecodeFullMs)
	setFloat(&c.TransferMsPerToken, DefaultTransferMsPerToken)
	setFloat(&c.Slowdown, 1)
	return c
}

// Validate reports the first field that cannot describe an engine, naming it.
func (c Config) Validate() error {
	if c.BlockTokens < 1 {
		return fmt.Errorf("%w: BlockTokens %d < 1", ErrInvalidConfig, c.BlockTokens)
	}
	if c.MaxLoras < 0 {
		return fmt.Errorf("%w: MaxLoras %d < 0", ErrInvalidConfig, c.MaxLoras)
	}
	if c.KVCapacityTokens < c.BlockTokens {
		return fmt.Errorf("%w: KVCapacityTokens %d holds no block of %d tokens",
			ErrInvalidConfig, c.KVCapacityTokens, c.BlockTokens)
	}
	if err := positiveInts([]intField{
		{"BytesPerToken", c.BytesPerToken}, {"MaxNumSeqs", c.MaxNumSeqs},
		{"MaxBatchedTokens", c.MaxBatchedTokens},
	}); err != nil {
		return err
	}
	if err := finiteNonNegative([]floatField{
		{"PrefillQuadMs", c.PrefillQuadMs}, {"PrefillLinearMs", c.PrefillLinearMs},
		{"PrefillBaseMs", c.PrefillBaseMs}, {"DecodeEmptyMs", c.DecodeEmptyMs},
		{"DecodeFullMs", c.DecodeFullMs}, {"TransferMsPerToken", c.TransferMsPerToken},
		{"LoraSwapMs", c.LoraSwapMs},
	}); err != nil {
		return err
	}
	return ValidateSlowdown(c.Slowdown)
}

// ValidateSlowdown refuses a slowdown factor that is not a positive finite number.
func ValidateSlowdown(f float64) error {
	if !(f > 0) || math.IsInf(f, 0) {
		return fmt.Errorf("%w: Slowdown %v must be positive and finite", ErrInvalidConfig, f)
	}
	return nil
}

type intField struct {
	name  string
	value int
}

type floatField struct {
	name  string
	value float64
}

func positiveInts(fields []intField) error {
	for _, f := range fields {
		if f.value < 1 {
			return fmt.Errorf("%w: %s %d < 1", ErrInvalidConfig, f.name, f.value)
		}
	}
	return nil
}

func finiteNonNegative(fields []floatField) error {
	for _, f := range fields {
		if !(f.value >= 0) || math.IsInf(f.value, 0) {
			return fmt.Errorf("%w: %s %v must be finite and >= 0", ErrInvalidConfig, f.name, f.value)
		}
	}
	return nil
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setFloat(p *float64, def float64) {
	if *p == 0 {
		*p = def
	}
}
