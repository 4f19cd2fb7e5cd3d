package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/affinity"
)

// env is the environment variable that also sets a flag: ROUTER_<NAME>.
func env(name string) []string {
	return []string{"ROUTER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func stringFlag(name, value, usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Value: value, Usage: usage, EnvVars: env(name)}
}

func sliceFlag(name, usage string) *cli.StringSliceFlag {
	return &cli.StringSliceFlag{Name: name, Usage: usage, EnvVars: env(name)}
}

func intFlag(name string, value int, usage string) *cli.IntFlag {
	return &cli.IntFlag{Name: name, Value: value, Usage: usage, EnvVars: env(name)}
}

func int64Flag(name string, value int64, usage string) *cli.Int64Flag {
	return &cli.Int64Flag{Name: name, Value: value, Usage: usage, EnvVars: env(name)}
}

func floatFlag(name string, value float64, usage string) *cli.Float64Flag {
	return &cli.Float64Flag{Name: name, Value: value, Usage: usage, EnvVars: env(name)}
}

func boolFlag(name, usage string) *cli.BoolFlag {
	return &cli.BoolFlag{Name: name, Usage: usage, EnvVars: env(name)}
}

func durationFlag(name string, value string, usage string) *cli.StringFlag {
	return stringFlag(name, value, usage+" (a Go duration such as 90s or 2m)")
}

// serveFlags are the flags of `router serve`, with vllm-router's names where
// the meaning is the same, and every other flag of vllm-router accepted
// (compatFlags).
func serveFlags() []cli.Flag {
	return append(append(append(append(ownFlags(), discoveryFlags()...), admissionFlags()...), kvEventsFlags()...), compatFlags()...)
}

func ownFlags() []cli.Flag {
	return []cli.Flag{
		stringFlag("host", "127.0.0.1", "address to listen on"),
		intFlag("port", 30000, "port of the API, health, metrics and admin endpoints"),
		sliceFlag("worker-urls", "worker URLs to register at start (repeatable or comma-separated)"),
		stringFlag("policy", "cache_aware", "routing policy: cache_aware, round_robin, random, power_of_two, least_load, consistent_hash (alias rendezvous_hash), cache_aware_fleet_gate"),
		stringFlag("miss-placement", "least_load", "where cache_aware places a miss: least_load or rendezvous"),
		floatFlag("cache-threshold", 0.3, "share of the routing text that must be cached for a hit (strictly above)"),
		floatFlag("balance-abs-threshold", 64, "in-flight requests above the least-loaded candidate before a worker can be overloaded"),
		floatFlag("balance-rel-threshold", 1.5, "factor over the least-loaded candidate before a worker can be overloaded"),
		floatFlag("hot-prefix-load", affinity.DefaultHotLoad, "in-flight requests above the least-loaded candidate on every owner of a prefix with as many hits in the last second before it spreads to another owner; 0 = never"),
		intFlag("hot-prefix-owners", affinity.DefaultHotOwners, "most workers a hot prefix spreads over, its owners included"),
		&cli.IntFlag{Name: "eviction-interval", Aliases: []string{"eviction-interval-secs"}, Value: 120,
			Usage: "seconds between sweeps of the prefix ownership index", EnvVars: env("eviction-interval")},
		int64Flag("max-tree-size", 1<<26, "per-worker budget of the prefix ownership index, in bytes of prefix"),
		durationFlag("prefix-ttl", "0s", "forget prefix ownership unused for this long; 0 keeps it until the budget evicts it"),
		intFlag("block-size", 256, "bytes per hashed block of routing text; every replica must agree"),
		boolFlag("vllm-pd-disaggregation", "route prefill and decode separately, vLLM (NIXL) protocol"),
		boolFlag("pd-disaggregation", "route prefill and decode separately, SGLang (bootstrap) protocol"),
		sliceFlag("prefill", "prefill worker URL, optionally followed by its bootstrap port or 'none' (repeatable)"),
		sliceFlag("decode", "decode worker URL (repeatable)"),
		stringFlag("prefill-policy", "cache_aware", "policy for prefill workers"),
		stringFlag("decode-policy", "least_load", "policy for decode workers"),
		floatFlag("prefill-cache-threshold", -1, "cache threshold for prefill (default: --cache-threshold)"),
		floatFlag("prefill-balance-abs-threshold", -1, "balance-abs-threshold for prefill (default: the global one)"),
		floatFlag("prefill-balance-rel-threshold", -1, "balance-rel-threshold for prefill (default: the global one)"),
		floatFlag("decode-balance-abs-threshold", -1, "balance-abs-threshold for decode (default: the global one)"),
		floatFlag("decode-balance-rel-threshold", -1, "balance-rel-threshold for decode (default: the global one)"),
		int64Flag("max-payload-size", 512<<20, "largest request body accepted, in bytes"),
		int64Flag("max-response-size", 256<<20, "largest non-streamed worker answer buffered, in bytes; larger ones are a 502"),
		intFlag("request-timeout-secs", 1800, "upper bound of a request, every attempt, backoff and the whole stream included"),
		intFlag("max-concurrent-requests", 32768, "upper bound of the requests in flight, and capacity of the admission rate bucket; 0: neither bound"),
		floatFlag("rate-limit-tokens-per-second", 0, "refill rate of the admission bucket, fractions allowed (default: --max-concurrent-requests per second)"),
		intFlag("queue-size", 100, "requests that may wait for admission, over every class; past it the lowest class is shed, or 429"),
		intFlag("queue-timeout-secs", 60, "seconds a request waits for admission before 408"),
		sliceFlag("cors-allowed-origins", "browser origins that may call the API (default: any)"),
		intFlag("retry-max-retries", 5, "attempts per request in total, the first included"),
		intFlag("retry-initial-backoff-ms", 50, "backoff before the first retry"),
		intFlag("retry-max-backoff-ms", 30000, "largest backoff between retries"),
		floatFlag("retry-backoff-multiplier", 1.5, "factor of each backoff over the one before"),
		floatFlag("retry-jitter-factor", 0.2, "share of a backoff drawn at random either way"),
		boolFlag("disable-retries", "one attempt per request (and per P/D phase)"),
		boolFlag("disable-circuit-breaker", "circuits never open on request failures (health checks and verdicts still apply)"),
		intFlag("cb-failure-threshold", 10, "consecutive failures that open a worker's circuit"),
		intFlag("cb-success-threshold", 3, "successes in half-open that close it"),
		intFlag("cb-timeout-duration-secs", 60, "seconds a circuit stays open before trial requests"),
		intFlag("health-check-interval-secs", 60, "seconds between active health checks"),
		intFlag("health-check-timeout-secs", 5, "timeout of one health check (default 5, or the interval if shorter)"),
		intFlag("health-failure-threshold", 3, "failed checks that mark a worker unhealthy"),
		intFlag("health-success-threshold", 2, "good checks that mark it healthy again"),
		stringFlag("health-check-endpoint", "/health", "path probed on each worker"),
		durationFlag("wedge-timeout", "60s", "a worker with requests in flight and no progress (headers, body bytes, engine tokens) for this long is wedged, and its unanswered requests are retried elsewhere"),
		durationFlag("degrade-window", "10s", "how far back per-request token rates count for degrade detection"),
		floatFlag("degrade-ratio", 0.2, "a worker whose token rate is below this share of its peers' median is degraded"),
		stringFlag("prometheus-host", "127.0.0.1", "address of the extra metrics listener"),
		intFlag("prometheus-port", 29000, "port of an extra /metrics listener; 0 = none (/metrics is always on --port too)"),
		stringFlag("debug-addr", "", "loopback host:port serving Go's runtime profiles (/debug/pprof/); empty = off"),
		sliceFlag("request-id-headers", "client headers that carry a request id (default x-request-id, x-correlation-id, x-trace-id, request-id)"),
		stringFlag("api-key", "", "bearer token sent to workers on requests that carry none (ROUTER_API_KEY or --api-key-file keep it out of ps)"),
		stringFlag("api-key-file", "", "file whose content is --api-key"),
		stringFlag("api-keys", "", "bearer keys clients must present on every route but /health, /liveness and /readiness: a comma-separated list, or a file (@path, or any value with a /) with one key a line; reread on SIGHUP"),
		stringFlag("tls-cert-path", "", "certificate (PEM) of the client listener, which then speaks TLS; reread on SIGHUP"),
		stringFlag("tls-key-path", "", "private key (PEM) of --tls-cert-path"),
		sliceFlag("allowed-worker-hosts", "CIDRs, addresses and host patterns (*.svc.cluster.local) workers may have; default: any but link-local and metadata addresses"),
		intFlag("header-read-timeout-secs", 30, "seconds a client has for its first byte and each request's headers"),
		intFlag("body-read-timeout-secs", 120, "seconds a client has to send a request body"),
		intFlag("write-timeout-secs", 60, "seconds each write to a client may take (each chunk of a stream); a client that stops reading is cut"),
		intFlag("idle-timeout-secs", 90, "seconds a keep-alive client connection may stay idle"),
		intFlag("max-connections", 16384, "client connections per replica; past it a connection is answered 503"),
		intFlag("max-header-size", 64<<10, "bytes of a request's line and headers; past it 431"),
		int64Flag("max-buffered-body-bytes", 512<<20, "bytes of request bodies held at once, at least --max-payload-size; a body past it is answered 503 with Retry-After before it is read"),
		stringFlag("log-level", "info", "debug, info, warn (or warning), error (or critical)"),
		stringFlag("log-dir", "", "also write the log to a file a day in this directory (the last 7 kept)"),
		boolFlag("log-json", "log as JSON lines (one per request at INFO, besides the replica's own events)"),
		stringFlag("node-name", "", "this replica's name in the cluster (default: the host name)"),
		stringFlag("data-dir", "", "where Raft keeps its log and snapshots (default: <user cache dir>/kvrouter/<node-name>)"),
		stringFlag("gossip-bind", "127.0.0.1:7946", "memberlist host:port"),
		stringFlag("gossip-advertise", "", "memberlist host:port other replicas reach (default: --gossip-bind)"),
		stringFlag("raft-bind", "127.0.0.1:7947", "Raft host:port"),
		stringFlag("raft-advertise", "", "Raft host:port other replicas reach (default: --raft-bind)"),
		sliceFlag("join", "memberlist host:port of a running replica (repeatable)"),
		intFlag("bootstrap-expect", 1, "replicas that form the voter set"),
		stringFlag("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip"),
		stringFlag("admin-token", "", "bearer token of the admin API; without one only loopback clients may use it (ROUTER_ADMIN_TOKEN or --admin-token-file keep it out of ps)"),
		stringFlag("admin-token-file", "", "file whose content is --admin-token"),
		stringFlag("cluster-tls-cert", "", "PEM certificate this replica presents to its peers (see: router tls init)"),
		stringFlag("cluster-tls-key", "", "PEM key of --cluster-tls-cert"),
		stringFlag("cluster-tls-ca", "", "PEM certificate of the CA that signs every replica's; peers without one are refused"),
		boolFlag("insecure-cluster", "allow gossip or Raft binds beyond loopback without --gossip-key and cluster TLS"),
		boolFlag("enable-trace", "OpenTelemetry spans per request and per upstream attempt, exported by OTLP/HTTP (to --otlp-traces-endpoint, else $OTEL_EXPORTER_OTLP_ENDPOINT)"),
		&cli.StringFlag{Name: "otlp-traces-endpoint", Aliases: []string{"otlp-endpoint"}, EnvVars: env("otlp-traces-endpoint"),
			Usage: "OTLP/HTTP collector (host:port, or a URL); setting it turns tracing on"},
		floatFlag("otel-sampling-ratio", 1.0, "share of traces sampled, parent-based"),
		sliceFlag("otel-excluded-paths", "paths without spans (only the inference API is traced; accepted as vllm-router has it)"),
		&cli.BoolFlag{Name: "version", Aliases: []string{"V"}, Usage: "print the version and exit"},
		durationFlag("raft-heartbeat-timeout", "1s", "how long a follower goes without the leader before it stands for election"),
		durationFlag("raft-election-timeout", "2s", "how long a candidate waits for votes before it tries again"),
		durationFlag("raft-leader-lease-timeout", "1s", "how long a leader goes without a quorum before it steps down (at most the heartbeat timeout)"),
		durationFlag("raft-commit-timeout", "50ms", "how long the leader waits before sending entries it has not batched"),
		durationFlag("reap-timeout", "30s", "how long a replica may be out of the gossip, and silent, before the leader removes it from Raft"),
		durationFlag("join-timeout", "30s", "how long a starting replica keeps trying --join before it gives up"),
		durationFlag("worker-connect-timeout", "10s", "bound on connecting to a worker"),
		durationFlag("worker-idle-timeout", "4s", "how long a pooled connection to a worker may stay idle and be reused; keep it below the workers' own keep-alive timeout (5s in vLLM and SGLang)"),
	}
}
