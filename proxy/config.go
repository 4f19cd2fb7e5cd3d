package proxy

import (
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/internal/workerurl"
)

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
	// Admission is how requests are admitted: vllm-router's bounds
	// (--max-concurrent-requests and friends), priority classes, tenants
	// and the engines' saturation signal (admission.Config, default
	// admission.DefaultConfig); the door that admits with it is
	// package admit's.
	Admission admission.Config
	// Retry says when and how a failed attempt is retried.
	Retry Retry
	// Migration says when a stream cut after its first byte resumes on
	// another worker (migrate.go; the router's default DefaultMigration).
	// Limit 0, the zero value's, turns it off; buffer bounds of 0 take
	// their defaults.
	Migration Migration
	// RequestIDHeaders are the client headers that may carry a request id,
	// in order of preference (--request-id-headers).
	RequestIDHeaders []string
	// APIKey, when set, is sent to workers as a bearer token on requests
	// that carry no Authorization of their own (--api-key).
	APIKey string
	// DialTimeout bounds connecting to a worker (default 10 s).
	DialTimeout time.Duration
	// WorkerIdleTimeout is how long a pooled connection to a worker may stay
	// idle and still be reused (--worker-idle-timeout, default 4 s). It
	// should be below the worker's own keep-alive timeout (5 s in uvicorn,
	// which vLLM and SGLang serve with), so that the router retires a
	// connection before the worker closes it under a request in flight.
	WorkerIdleTimeout time.Duration
	// BlockSize is the index's block size in bytes (--block-size), to turn a
	// worker's KV capacity into its index budget; 0 leaves budgets alone.
	BlockSize int

	// Edge bounds what a client connection may cost.
	Edge Edge
	// APIKeys, when not empty, are the bearer keys clients must present on
	// the inference API (--api-keys); their Authorization header is then
	// not passed on to workers. Replace them at run time with SetAPIKeys.
	APIKeys []string
	// TLSCertPath and TLSKeyPath, when set, make the client listener speak
	// TLS (--tls-cert-path, --tls-key-path); ReloadTLS rereads them.
	TLSCertPath, TLSKeyPath string
	// CORSOrigins are the browser origins that may call the API
	// (--cors-allowed-origins); none allows any.
	CORSOrigins []string
	// WorkerHosts says which destinations workers may have
	// (--allowed-worker-hosts); a refused one gets no traffic.
	WorkerHosts workerurl.HostPolicy
	// Tokenize asks the engines for prompts' token IDs, for routing on
	// their KV events (tokenize.go); off by default.
	Tokenize TokenizeConfig
	// LoRA is how the proxy follows the engines' LoRA adapters (lora.go).
	LoRA LoRAConfig
	// StoredResponseOwnerBytes bounds the owners of stored responses the
	// replica remembers, in bytes (default
	// DefaultStoredResponseOwnerBytes); past it the least recently used
	// are forgotten, and found again by asking the workers.
	StoredResponseOwnerBytes int64
}

// Edge holds the limits and timeouts of the client listener, each what a
// production proxy would choose by default. Zero values take the defaults.
type Edge struct {
	// HeaderReadTimeout bounds a new connection's wait for its first byte
	// and the reading of each request's line and headers
	// (--header-read-timeout-secs, default 30 s): slowloris connections and
	// connections that never send a byte are closed after it.
	HeaderReadTimeout time.Duration
	// BodyReadTimeout bounds the reading of a request body, from the end of
	// its headers (--body-read-timeout-secs, default 120 s).
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write to the client, every chunk of a stream
	// included (--write-timeout-secs, default 60 s): a client that stops
	// reading is cut, and its worker slot freed.
	WriteTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait between requests
	// (--idle-timeout-secs, default 90 s).
	IdleTimeout time.Duration
	// MaxConnections caps the client connections of this replica
	// (--max-connections, default 16384); a connection past it is answered
	// 503 and closed, and the listener goes on accepting.
	MaxConnections int
	// MaxHeaderSize bounds a request's line and headers, in bytes
	// (--max-header-size, default 64 KiB); beyond it the client gets 431.
	MaxHeaderSize int
	// MaxBufferedBodyBytes bounds the bytes of request bodies the replica
	// holds at once, each as it arrives (package bodyintake) until its answer
	// is written or its stream starts (--max-buffered-body-bytes, default
	// 512 MiB, at least MaxPayloadSize); a body that has no room to grow
	// is answered 503 with Retry-After (before it is read, when there is no
	// room for its first 16 KiB).
	MaxBufferedBodyBytes int64
	// MaxBodyShare is the share of MaxBufferedBodyBytes one client keeps
	// while others need room: one API key, or without keys one address (an
	// IPv6 one by its /64), over all its connections (--max-body-share,
	// default 0.5, in (0, 1]). A client uses what the others leave; when
	// another needs room, the largest body still arriving of a client past
	// its share is cut with 503 (package bodyintake).
	MaxBodyShare float64
	// MinBodyRate is the rate, in bytes a second, at which a body must
	// arrive on average once BodyRateGrace has passed (--min-body-rate,
	// default 16 KiB/s); a body that falls behind is cut with 408 and its
	// connection closed. Negative: no such rate.
	MinBodyRate int
	// BodyRateGrace is the time a body has before MinBodyRate applies,
	// from when its reading begins (--body-rate-grace-secs, default 10 s).
	// Negative: none.
	BodyRateGrace time.Duration
}

// DefaultEdge returns the defaults of the client listener's limits.
func DefaultEdge() Edge {
	return Edge{HeaderReadTimeout: 30 * time.Second, BodyReadTimeout: 120 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 90 * time.Second, MaxConnections: 16384, MaxHeaderSize: 64 << 10, MaxBufferedBodyBytes: 512 << 20,
		MaxBodyShare: 0.5, MinBodyRate: 16 << 10, BodyRateGrace: 10 * time.Second}
}

func (e Edge) withDefaults() Edge {
	d := DefaultEdge()
	for _, f := range []struct{ v, d *time.Duration }{{&e.HeaderReadTimeout, &d.HeaderReadTimeout},
		{&e.BodyReadTimeout, &d.BodyReadTimeout}, {&e.WriteTimeout, &d.WriteTimeout}, {&e.IdleTimeout, &d.IdleTimeout}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if e.MaxConnections <= 0 {
		e.MaxConnections = d.MaxConnections
	}
	if e.MaxHeaderSize <= 0 {
		e.MaxHeaderSize = d.MaxHeaderSize
	}
	if e.MaxBufferedBodyBytes <= 0 {
		e.MaxBufferedBodyBytes = d.MaxBufferedBodyBytes
	}
	if e.MaxBodyShare <= 0 || e.MaxBodyShare > 1 {
		e.MaxBodyShare = d.MaxBodyShare
	}
	if e.MinBodyRate == 0 {
		e.MinBodyRate = d.MinBodyRate
	}
	if e.BodyRateGrace == 0 {
		e.BodyRateGrace = d.BodyRateGrace
	}
	return e
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
		MaxPayloadSize:           512 << 20,
		MaxResponseSize:          256 << 20,
		RequestTimeout:           1800 * time.Second,
		Migration:                DefaultMigration(),
		Retry:                    Retry{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 30 * time.Second, Multiplier: 1.5, Jitter: 0.2},
		RequestIDHeaders:         []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		DialTimeout:              10 * time.Second,
		WorkerIdleTimeout:        defaultWorkerIdleTimeout,
		Edge:                     DefaultEdge(),
		Admission:                admission.DefaultConfig(),
		Tokenize:                 TokenizeConfig{Timeout: DefaultTokenizeTimeout, CacheBytes: DefaultTokenCacheBytes},
		StoredResponseOwnerBytes: DefaultStoredResponseOwnerBytes,
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
	if c.Migration.BufferBytes <= 0 {
		c.Migration.BufferBytes = d.Migration.BufferBytes
	}
	if c.Migration.TotalBytes <= 0 {
		c.Migration.TotalBytes = d.Migration.TotalBytes
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
	if c.WorkerIdleTimeout <= 0 {
		c.WorkerIdleTimeout = d.WorkerIdleTimeout
	}
	c.Edge = c.Edge.withDefaults()
	if c.StoredResponseOwnerBytes <= 0 {
		c.StoredResponseOwnerBytes = DefaultStoredResponseOwnerBytes
	}
	return c
}
