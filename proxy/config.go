package proxy

import "time"

// Config holds the request-path settings of a replica. Zero values take the
// defaults of DefaultConfig.
type Config struct {
	// MaxPayloadSize is the largest request body accepted, in bytes
	// (--max-payload-size, default 512 MiB). A body exactly this size is
	// routed; one byte more is refused with 413 before any worker is
	// contacted.
	MaxPayloadSize int
	// MaxResponseSize is the largest non-streamed worker answer the router
	// buffers, in bytes (--max-response-size, default 256 MiB); a larger one
	// is a 502. Streams are relayed chunk by chunk and have no such bound.
	MaxResponseSize int
	// RequestTimeout bounds a request from its arrival to the end of its
	// response, every attempt and backoff included (--request-timeout-secs,
	// default 1800 s). No attempt starts after it.
	RequestTimeout time.Duration
	// MaxConcurrentRequests caps inference requests in flight on this
	// replica; beyond it clients get 429 (--max-concurrent-requests, 0 =
	// no cap).
	MaxConcurrentRequests int
	// Retry says when and how a failed attempt is retried.
	Retry Retry
	// RequestIDHeaders are the client headers that may carry a request id,
	// in order of preference (--request-id-headers).
	RequestIDHeaders []string
	// APIKey, when set, is sent to workers as a bearer token on requests
	// that carry no Authorization of their own (--api-key).
	APIKey string
	// DialTimeout bounds connecting to a worker (default 10 s).
	DialTimeout time.Duration
	// BlockSize is the index's block size in bytes (--block-size), to turn a
	// worker's KV capacity into its index budget; 0 leaves budgets alone.
	BlockSize int
}

// Retry configures retries. Attempts happen only before any byte of the
// response reached the client, on connect errors, broken or stuck
// exchanges and retryable statuses (408, 429, 500, 502, 503, 504).
type Retry struct {
	// MaxAttempts counts every attempt of one phase of a request, the first
	// included (--retry-max-retries, default 5). Once every candidate was
	// tried, the least recently failed one is tried again.
	MaxAttempts    int
	InitialBackoff time.Duration // --retry-initial-backoff-ms, default 50 ms
	MaxBackoff     time.Duration // --retry-max-backoff-ms, default 30 s
	Multiplier     float64       // default 1.5
	Jitter         float64       // fraction of the backoff, default 0.2
}

// DefaultConfig returns the reference routers' defaults.
func DefaultConfig() Config {
	return Config{
		MaxPayloadSize:   512 << 20,
		MaxResponseSize:  256 << 20,
		RequestTimeout:   1800 * time.Second,
		Retry:            Retry{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 30 * time.Second, Multiplier: 1.5, Jitter: 0.2},
		RequestIDHeaders: []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		DialTimeout:      10 * time.Second,
	}
}

func withDefaults(c Config) Config {
	d := DefaultConfig()
	if c.MaxPayloadSize <= 0 {
		c.MaxPayloadSize = d.MaxPayloadSize
	}
	if c.MaxResponseSize <= 0 {
		c.MaxResponseSize = d.MaxResponseSize
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = d.Retry.MaxAttempts
	}
	if c.Retry.Multiplier < 1 {
		c.Retry.Multiplier = d.Retry.Multiplier
	}
	if c.Retry.MaxBackoff <= 0 {
		c.Retry.MaxBackoff = d.Retry.MaxBackoff
	}
	if len(c.RequestIDHeaders) == 0 {
		c.RequestIDHeaders = d.RequestIDHeaders
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	return c
}
