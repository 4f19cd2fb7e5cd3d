package main

import (
	"strings"

	"github.com/urfave/cli/v2"
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
// the meaning is the same.
func serveFlags() []cli.Flag {
	return []cli.Flag{
		stringFlag("host", "127.0.0.1", "address to listen on"),
		intFlag("port", 8080, "port of the API, health, metrics and admin endpoints"),
		sliceFlag("worker-urls", "worker URLs to register at start (repeatable or comma-separated)"),
		stringFlag("policy", "cache_aware", "routing policy: cache_aware, round_robin, random, power_of_two, least_load, consistent_hash, cache_aware_fleet_gate"),
		stringFlag("miss-placement", "least_load", "where cache_aware places a miss: least_load or rendezvous"),
		floatFlag("cache-threshold", 0.3, "share of the routing text that must be cached for a hit (strictly above)"),
		floatFlag("balance-abs-threshold", 64, "in-flight requests above the least-loaded candidate before a worker can be overloaded"),
		floatFlag("balance-rel-threshold", 1.5, "factor over the least-loaded candidate before a worker can be overloaded"),
		intFlag("eviction-interval", 120, "seconds between sweeps of the prefix ownership index"),
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
		intFlag("max-concurrent-requests", 0, "inference requests in flight on this replica before 429; 0 = no cap"),
		intFlag("retry-max-retries", 5, "attempts per request in total, the first included"),
		intFlag("retry-initial-backoff-ms", 50, "backoff before the first retry"),
		intFlag("retry-max-backoff-ms", 30000, "largest backoff between retries"),
		intFlag("cb-failure-threshold", 10, "consecutive failures that open a worker's circuit"),
		intFlag("cb-success-threshold", 3, "successes in half-open that close it"),
		intFlag("cb-timeout-duration-secs", 60, "seconds a circuit stays open before trial requests"),
		intFlag("health-check-interval-secs", 60, "seconds between active health checks"),
		intFlag("health-check-timeout-secs", 5, "timeout of one health check"),
		intFlag("health-failure-threshold", 3, "failed checks that mark a worker unhealthy"),
		intFlag("health-success-threshold", 2, "good checks that mark it healthy again"),
		stringFlag("health-check-endpoint", "/health", "path probed on each worker"),
		durationFlag("wedge-timeout", "60s", "a worker with requests in flight and no progress for this long is wedged"),
		stringFlag("prometheus-host", "127.0.0.1", "address of the extra metrics listener"),
		intFlag("prometheus-port", 0, "port of an extra /metrics listener; 0 = none (/metrics is always on --port)"),
		stringFlag("debug-addr", "", "loopback host:port serving Go's runtime profiles (/debug/pprof/); empty = off"),
		sliceFlag("request-id-headers", "client headers that carry a request id (default x-request-id, x-correlation-id, x-trace-id, request-id)"),
		stringFlag("api-key", "", "bearer token sent to workers on requests that carry none"),
		stringFlag("api-keys", "", "bearer keys clients must present on the inference API: a file with one key a line, or a comma-separated list; reread on SIGHUP"),
		stringFlag("tls-cert-path", "", "certificate (PEM) of the client listener, which then speaks TLS; reread on SIGHUP"),
		stringFlag("tls-key-path", "", "private key (PEM) of --tls-cert-path"),
		sliceFlag("allowed-worker-hosts", "CIDRs, addresses and host patterns (*.svc.cluster.local) workers may have; default: any but link-local and metadata addresses"),
		intFlag("header-read-timeout-secs", 30, "seconds a client has for its first byte and each request's headers"),
		intFlag("body-read-timeout-secs", 120, "seconds a client has to send a request body"),
		intFlag("write-timeout-secs", 60, "seconds each write to a client may take (each chunk of a stream); a client that stops reading is cut"),
		intFlag("idle-timeout-secs", 90, "seconds a keep-alive client connection may stay idle"),
		intFlag("max-connections", 16384, "client connections per replica; past it a connection is answered 503"),
		intFlag("max-header-size", 64<<10, "bytes of a request's line and headers; past it 431"),
		stringFlag("log-level", "info", "debug, info, warn or error"),
		stringFlag("node-name", "", "this replica's name in the cluster (default: the host name)"),
		stringFlag("data-dir", "", "where Raft keeps its log and snapshots (default: <user cache dir>/kvrouter/<node-name>)"),
		stringFlag("gossip-bind", "127.0.0.1:7946", "memberlist host:port"),
		stringFlag("gossip-advertise", "", "memberlist host:port other replicas reach (default: --gossip-bind)"),
		stringFlag("raft-bind", "127.0.0.1:7947", "Raft host:port"),
		stringFlag("raft-advertise", "", "Raft host:port other replicas reach (default: --raft-bind)"),
		sliceFlag("join", "memberlist host:port of a running replica (repeatable)"),
		intFlag("bootstrap-expect", 1, "replicas that form the voter set"),
		stringFlag("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip"),
		stringFlag("admin-token", "", "bearer token of the admin API; without one only loopback clients may use it"),
	}
}
