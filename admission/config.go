package admission

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Config is what a replica's door admits requests with, as the operator
// sets it (the router's admission flags): vllm-router's bounds, and the
// classes, tenants and saturation signal that decide the order within
// them. The router's flags take their defaults from DefaultConfig, and
// fleetsim's door runs with it. The zero value admits everything at once.
type Config struct {
	// Capacity bounds the requests in flight and is the burst of the rate
	// bucket (--max-concurrent-requests, default DefaultCapacity); 0:
	// neither bound.
	Capacity int
	// RefillPerSec refills the bucket (--rate-limit-tokens-per-second);
	// 0: Capacity per second.
	RefillPerSec float64
	// QueueSize bounds the requests waiting (--queue-size, default
	// DefaultQueueSize); 0: no queue.
	QueueSize int
	// QueueTimeout is how long a request may wait in the queue
	// (--queue-timeout-secs, default DefaultQueueTimeout, which a door
	// also takes for 0).
	QueueTimeout time.Duration

	// Classes, highest first (--priority-classes); empty: one class, and
	// priority headers are ignored.
	Classes []string
	// DefaultClass is the class of a request that names none
	// (--priority-default-class).
	DefaultClass string
	// Reserved are the slots per class that lower classes may not take
	// (--priority-reserved).
	Reserved map[string]int
	// EnginePriority says the engines run vLLM's priority scheduling
	// (--engine-priority): a request's class goes on to the engine as its
	// body's priority field (the class's rank, 0 the highest: vLLM serves
	// lower first), replacing any the client sent, on every route whose body
	// an engine reads one from (the proxy's enginepriority.go). Off: the
	// body goes unchanged.
	EnginePriority bool
	// LendReserved lets lower classes borrow the reserved slots a class
	// leaves unused (--lend-reserved-slots), which the class takes back
	// over the engines' limit. It pays only where the engine preempts a
	// running request for a higher-priority waiting one: vLLM v1 does not,
	// and there the class waits first in the engine's queue for the next
	// slot a borrower frees (BENCHMARKS.md: 70x the interactive TTFT p99).
	// Off: a reserved slot stays idle while its class is.
	LendReserved bool
	// PreemptByResume makes a class that takes back a slot it lent take it
	// at once (--preempt-by-resume): a borrower's stream on the worker the
	// class's request goes to gives its slot back at its next chunk, its
	// request ended at the engine, and resumes, its client seeing a pause,
	// when admission lets it in again (the proxy's preempt.go). Needs
	// LendReserved, and streams that may resume (--migration-limit).
	PreemptByResume bool

	// KeyClasses gives, per API key, the class of its requests
	// (--api-key-classes): the class of those that name none, and the
	// highest any of them gets. A key without one is held to DefaultClass.
	// Needs API keys: a key the router does not check proves nothing.
	KeyClasses map[string]string
	// KeyTenants gives, per API key, the tenants it speaks for, its own
	// first (--api-key-tenants KEY=tenant, repeatable): several keys may
	// share a tenant, and a key may name one of its tenants in
	// TenantHeader. Without an entry a key's tenant is the key itself (a
	// digest of it: the key never appears). Needs API keys.
	KeyTenants map[string][]string
	// TenantHeader names the header that says a request's tenant
	// (--tenant-header). Without API keys it is taken as sent; with them a
	// key may name only a tenant of KeyTenants' (403 otherwise). A request
	// without it is its key's first tenant, else "anonymous".
	TenantHeader string
	// TenantMaxInFlight is one tenant's ceiling (--tenant-max-inflight);
	// 0: none.
	TenantMaxInFlight int
	// TierFair makes the peers' queue reports count (--tier-fairness,
	// default on).
	TierFair bool
	// MaxTenantBytes bounds the admission's tenant tables, in bytes; past
	// it new tenants share OverflowTenant. Default DefaultMaxTenantBytes.
	MaxTenantBytes int64
	// KVFull is the KV cache usage, a share in (0, 1], at which an engine
	// counts as full (--saturation-kv-usage, default DefaultKVFull).
	KVFull float64
}

// Defaults of Config: vllm-router's bounds.
const (
	DefaultCapacity     = 32768
	DefaultQueueSize    = 100
	DefaultQueueTimeout = 60 * time.Second
)

// DefaultConfig returns what a door admits with when the operator says
// nothing: vllm-router's bounds, tier-wide fairness, one class.
func DefaultConfig() Config {
	return Config{Capacity: DefaultCapacity, QueueSize: DefaultQueueSize, QueueTimeout: DefaultQueueTimeout,
		TierFair: true, KVFull: DefaultKVFull}
}

// Scheduler is the SchedulerConfig c builds a door's Scheduler with.
func (c Config) Scheduler() SchedulerConfig {
	s := SchedulerConfig{Classes: c.Classes, Default: c.DefaultClass, Reserved: c.Reserved, MaxInFlight: c.Capacity,
		QueueSize: c.QueueSize, QueueTimeout: c.QueueTimeout, TenantMaxInFlight: c.TenantMaxInFlight, TierFair: c.TierFair,
		Lend: c.LendReserved, MaxTenantBytes: c.MaxTenantBytes}
	if c.Capacity > 0 {
		s.RatePerSec, s.Burst = c.RefillPerSec, c.Capacity
		if s.RatePerSec <= 0 {
			s.RatePerSec = float64(c.Capacity)
		}
	}
	return s
}

// Timeout is how long a request may wait in the queue: QueueTimeout, or
// DefaultQueueTimeout for 0.
func (c Config) Timeout() time.Duration {
	if c.QueueTimeout <= 0 {
		return DefaultQueueTimeout
	}
	return c.QueueTimeout
}

// Validate reports the first setting out of range, naming its flag; it
// wraps ErrConfig. The settings that need API keys are ValidateKeyed's.
func (c Config) Validate() error {
	switch {
	case c.Capacity < 0:
		return configError("--max-concurrent-requests", "must not be negative")
	case c.RefillPerSec < 0 || math.IsNaN(c.RefillPerSec):
		return configError("--rate-limit-tokens-per-second", "must not be negative")
	case c.Capacity > 0 && c.QueueSize > 0 && c.QueueTimeout <= 0:
		return configError("--queue-timeout-secs", "must be positive")
	case !(c.KVFull > 0 && c.KVFull <= 1):
		return configError("--saturation-kv-usage", "want a share in (0, 1], got %v", c.KVFull)
	case c.PreemptByResume && !c.LendReserved:
		return configError("--preempt-by-resume", "needs --lend-reserved-slots: a class takes back only a slot it lent")
	}
	if err := c.Scheduler().Validate(); err != nil {
		return err
	}
	if err := c.validKeyClasses(); err != nil {
		return err
	}
	if c.TenantHeader != "" && !validHeaderName(c.TenantHeader) {
		return configError("--tenant-header", "%s is not a header name", c.TenantHeader)
	}
	return validKeyTenants(c.KeyTenants)
}

// validKeyClasses refuses a key's class that is not one of the classes.
func (c Config) validKeyClasses() error {
	cl := NewClasses(c.Scheduler())
	for _, name := range c.KeyClasses {
		if _, err := cl.Parse(name); err != nil || !cl.Enabled() {
			return configError("--api-key-classes", "%s is not one of --priority-classes", name)
		}
	}
	return nil
}

// ValidateKeyed refuses what needs API keys without them (keys, the keys
// the API takes): a class or a tenant given to a key the router does not
// check would be anyone's for the asking. With keys, a tenant header counts
// only for the tenants KeyTenants gives keys, so a header without any is
// refused too.
func (c Config) ValidateKeyed(keys []string) error {
	switch {
	case len(keys) == 0 && len(c.KeyClasses) > 0:
		return configError("--api-key-classes", "needs --api-keys (a key the router does not check proves nothing)")
	case len(keys) == 0 && len(c.KeyTenants) > 0:
		return configError("--api-key-tenants", "needs --api-keys (a key the router does not check proves nothing)")
	case len(keys) > 0 && c.TenantHeader != "" && len(c.KeyTenants) == 0:
		return configError("--tenant-header", "with --api-keys a request's tenant is its key's, and the header names only a tenant --api-key-tenants gives the key; give some, or drop the header")
	}
	return nil
}

// ParseReserved reads --priority-reserved: "class=slots,class=slots".
func ParseReserved(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, v, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil {
			return nil, configError("--priority-reserved", "%q is not class=slots", part)
		}
		out[strings.TrimSpace(name)] = n
	}
	return out, nil
}
