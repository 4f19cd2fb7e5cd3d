package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
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

// Units in flag names follow one of three conventions:
//   - vllm-router's integer seconds or milliseconds, the unit in the name
//     (--request-timeout-secs, --retry-initial-backoff-ms): secondsFlag and
//     millisFlag, read with seconds and millis;
//   - vllm-router's integer seconds without the unit in the name
//     (--eviction-interval, whose alias --eviction-interval-secs says it):
//     secondsFlag too;
//   - ours: a Go duration such as 90s, the unit in the value and none in the
//     name (--wedge-timeout, --raft-heartbeat-timeout): durationFlag.
//
// A new duration flag is a durationFlag; the names vllm-router users type
// keep their name and integer meaning. Sizes are bytes, whatever the name
// says (--max-payload-size, --max-buffered-body-bytes).

// durationUnits ends the usage of a durationFlag in --help.
const durationUnits = " (a Go duration such as 90s or 2m)"

// durationFlag is a flag that takes a Go duration.
func durationFlag(name string, value time.Duration, usage string) *cli.DurationFlag {
	return &cli.DurationFlag{Name: name, Value: value, Usage: usage + durationUnits, EnvVars: env(name)}
}

// secondsFlag is a flag that takes whole seconds, with value's as its default.
func secondsFlag(name string, value time.Duration, usage string) *cli.IntFlag {
	return intFlag(name, int(value/time.Second), usage)
}

// millisFlag is a flag that takes whole milliseconds, with value's as its default.
func millisFlag(name string, value time.Duration, usage string) *cli.IntFlag {
	return intFlag(name, int(value/time.Millisecond), usage)
}

// seconds reads a secondsFlag.
func seconds(c *cli.Context, name string) time.Duration {
	return time.Duration(c.Int(name)) * time.Second
}

// millis reads a millisFlag.
func millis(c *cli.Context, name string) time.Duration {
	return time.Duration(c.Int(name)) * time.Millisecond
}

// hostAndPort splits a default host:port into the values of a --host and a
// --port flag.
func hostAndPort(addr string) (string, int) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("default address %q: %v", addr, err))
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		panic(fmt.Sprintf("default address %q: %v", addr, err))
	}
	return host, p
}

// serveFlags are the flags of `router serve`, with vllm-router's names where
// the meaning is the same, and every other flag of vllm-router accepted
// (compatFlags).
func serveFlags() []cli.Flag {
	var fs []cli.Flag
	for _, group := range [][]cli.Flag{ownFlags(), discoveryFlags(), admissionFlags(), kvEventsFlags(), loraFlags(), compatFlags()} {
		fs = append(fs, group...)
	}
	return categorized(fs)
}

// ownFlags are the flags of the replica itself, each with the default of
// the config field it sets (cluster.DefaultConfig).
func ownFlags() []cli.Flag {
	d := cluster.DefaultConfig()
	host, port := hostAndPort(d.HTTPAddr)
	metricsHost, metricsPort := hostAndPort(d.MetricsAddr)
	rt, th, p, h := d.Routing, d.Routing.Thresholds, d.Proxy, d.Health
	return []cli.Flag{
		stringFlag("host", host, "address to listen on"),
		intFlag("port", port, "port of the API, health, metrics and admin endpoints"),
		sliceFlag("worker-urls", "worker URLs to register at start (repeatable or comma-separated)"),
		stringFlag("policy", rt.Policy, "routing policy: cache_aware, round_robin, random, power_of_two, least_load, consistent_hash (alias rendezvous_hash), cache_aware_fleet_gate"),
		stringFlag("miss-placement", rt.MissPlacement, "where cache_aware places a miss: least_prefill, least_load or rendezvous"),
		floatFlag("cache-threshold", th.CacheThreshold, "share of the routing text that must be cached for a hit (strictly above)"),
		floatFlag("balance-abs-threshold", th.BalanceAbs, "in-flight requests above the least-loaded candidate before a worker can be overloaded"),
		floatFlag("balance-rel-threshold", th.BalanceRel, "factor over the least-loaded candidate before a worker can be overloaded"),
		floatFlag("hot-prefix-load", th.HotLoad, "in-flight requests above the least-loaded candidate on every owner of a prefix with as many hits in the last second before it spreads to another owner; 0 = never"),
		intFlag("hot-prefix-owners", th.HotOwners, "most workers a hot prefix spreads over, its owners included"),
		withAliases(secondsFlag("eviction-interval", rt.EvictionInterval, "seconds between sweeps of the prefix ownership index"),
			"eviction-interval-secs"),
		int64Flag("max-tree-size", rt.MaxTreeSize, "per-worker budget of the prefix ownership index, in bytes of prefix"),
		durationFlag("prefix-ttl", rt.PrefixTTL, "forget prefix ownership unused for this long; 0 keeps it until the budget evicts it"),
		intFlag("block-size", rt.BlockSize, "bytes per hashed block of routing text; every replica must agree"),
		boolFlag("vllm-pd-disaggregation", "route prefill and decode separately, vLLM (NIXL) protocol"),
		boolFlag("pd-disaggregation", "route prefill and decode separately, SGLang (bootstrap) protocol"),
		sliceFlag("prefill", "prefill worker URL, optionally followed by its bootstrap port or 'none' (repeatable)"),
		sliceFlag("decode", "decode worker URL (repeatable)"),
		stringFlag("prefill-policy", rt.PrefillPolicy, "policy for prefill workers"),
		stringFlag("decode-policy", rt.DecodePolicy, "policy for decode workers"),
		floatFlag("prefill-cache-threshold", notGiven, "cache threshold for prefill (default: --cache-threshold)"),
		floatFlag("prefill-balance-abs-threshold", notGiven, "balance-abs-threshold for prefill (default: the global one)"),
		floatFlag("prefill-balance-rel-threshold", notGiven, "balance-rel-threshold for prefill (default: the global one)"),
		floatFlag("decode-balance-abs-threshold", notGiven, "balance-abs-threshold for decode (default: the global one)"),
		floatFlag("decode-balance-rel-threshold", notGiven, "balance-rel-threshold for decode (default: the global one)"),
		int64Flag("max-payload-size", int64(p.MaxPayloadSize), "largest request body accepted, in bytes"),
		int64Flag("max-response-size", int64(p.MaxResponseSize), "largest non-streamed worker answer buffered, in bytes; larger ones are a 502"),
		secondsFlag("request-timeout-secs", p.RequestTimeout, "upper bound of a request, every attempt, backoff and the whole stream included"),
		intFlag("max-concurrent-requests", p.Admission.Capacity, "upper bound of the requests in flight, and capacity of the admission rate bucket; 0: neither bound"),
		floatFlag("rate-limit-tokens-per-second", p.Admission.RefillPerSec, "refill rate of the admission bucket, fractions allowed (default: --max-concurrent-requests per second)"),
		intFlag("queue-size", p.Admission.QueueSize, "requests that may wait for admission, over every class; past it the lowest class is shed, or 429"),
		secondsFlag("queue-timeout-secs", p.Admission.QueueTimeout, "seconds a request waits for admission before 408"),
		sliceFlag("cors-allowed-origins", "browser origins that may call the API (default: any)"),
		intFlag("retry-max-retries", p.Retry.MaxAttempts, "attempts per request phase in total, the first included: despite vllm-router's name it counts attempts, not retries (1: no retry)"),
		millisFlag("retry-initial-backoff-ms", p.Retry.InitialBackoff, "backoff before the first retry"),
		millisFlag("retry-max-backoff-ms", p.Retry.MaxBackoff, "largest backoff between retries"),
		floatFlag("retry-backoff-multiplier", p.Retry.Multiplier, "factor of each backoff over the one before"),
		floatFlag("retry-jitter-factor", p.Retry.Jitter, "share of a backoff drawn at random either way"),
		boolFlag("disable-retries", "one attempt per request (and per P/D phase)"),
		intFlag("migration-limit", p.Migration.Limit, "times a stream its worker cut after the first byte resumes on another worker (completions and chat completions; docs/failures.md says which shapes); 0: never, the stream fails visibly"),
		int64Flag("migration-buffer-bytes", int64(p.Migration.BufferBytes), "bytes of generated text one stream keeps to resume with; a stream past it fails visibly when cut"),
		int64Flag("migration-buffer-total-bytes", p.Migration.TotalBytes, "bytes every stream of the replica that may resume keeps at once to resume with: its generated text and its request body"),
		boolFlag("disable-circuit-breaker", "circuits never open on request failures (health checks and verdicts still apply)"),
		intFlag("cb-failure-threshold", h.CBFailureThreshold, "consecutive failures that open a worker's circuit"),
		intFlag("cb-success-threshold", h.CBSuccessThreshold, "successes in half-open that close it"),
		secondsFlag("cb-timeout-duration-secs", h.CBTimeout, "seconds a circuit stays open before trial requests"),
		secondsFlag("health-check-interval-secs", h.Interval, "seconds between active health checks"),
		secondsFlag("health-check-timeout-secs", h.Timeout, fmt.Sprintf("timeout of one health check (default %d, or the interval if shorter)", int(h.Timeout/time.Second))),
		intFlag("health-failure-threshold", h.FailureThreshold, "failed checks that mark a worker unhealthy"),
		intFlag("health-success-threshold", h.SuccessThreshold, "good checks that mark it healthy again"),
		stringFlag("health-check-endpoint", h.Endpoint, "path probed on each worker"),
		durationFlag("wedge-timeout", h.WedgeTimeout, "a worker with requests in flight and no progress (headers, body bytes, engine tokens) for this long is wedged, and its unanswered requests are retried elsewhere"),
		durationFlag("degrade-window", h.DegradeWindow, "how far back per-request token rates count for degrade detection"),
		floatFlag("degrade-ratio", h.DegradeRatio, "a worker whose token rate is below this share of its peers' median is degraded"),
		stringFlag("prometheus-host", metricsHost, "address of the extra metrics listener"),
		intFlag("prometheus-port", metricsPort, "port of an extra /metrics listener; 0 = none (/metrics is always on --port too)"),
		stringFlag("debug-addr", d.DebugAddr, "loopback host:port serving Go's runtime profiles (/debug/pprof/); empty = off"),
		sliceFlag("request-id-headers", "client headers that carry a request id (default "+strings.Join(p.RequestIDHeaders, ", ")+")"),
		stringFlag("api-key", "", "bearer token sent to workers on requests that carry none (ROUTER_API_KEY or --api-key-file keep it out of ps)"),
		stringFlag("api-key-file", "", "file whose content is --api-key"),
		stringFlag("api-keys", "", "bearer keys clients must present on every route but /health, /liveness and /readiness: a comma-separated list, or a file (@path, or any value with a /) with one key a line; reread on SIGHUP"),
		stringFlag("tls-cert-path", "", "certificate (PEM) of the client listener, which then speaks TLS; reread on SIGHUP"),
		stringFlag("tls-key-path", "", "private key (PEM) of --tls-cert-path"),
		sliceFlag("allowed-worker-hosts", "CIDRs, addresses and host patterns (*.svc.cluster.local) workers may have; default: any but link-local and metadata addresses"),
		secondsFlag("header-read-timeout-secs", p.Edge.HeaderReadTimeout, "seconds a client has for its first byte and each request's headers"),
		secondsFlag("body-read-timeout-secs", p.Edge.BodyReadTimeout, "seconds a client has to send a request body"),
		secondsFlag("write-timeout-secs", p.Edge.WriteTimeout, "seconds each write to a client may take (each chunk of a stream); a client that stops reading is cut"),
		secondsFlag("idle-timeout-secs", p.Edge.IdleTimeout, "seconds a keep-alive client connection may stay idle"),
		intFlag("max-connections", p.Edge.MaxConnections, "client connections per replica; past it a connection is answered 503"),
		intFlag("max-header-size", p.Edge.MaxHeaderSize, "bytes of a request's line and headers; past it 431"),
		int64Flag("max-buffered-body-bytes", p.Edge.MaxBufferedBodyBytes, "bytes of request bodies held at once, each as it arrives, at least --max-payload-size; a body with no room to grow is answered 503 with Retry-After"),
		floatFlag("max-body-share", p.Edge.MaxBodyShare, "share of --max-buffered-body-bytes one client (one API key, or one address, an IPv6 one by its /64) keeps while others need room: past it its largest body still arriving is cut"),
		intFlag("min-body-rate", p.Edge.MinBodyRate, "bytes a second a request body must arrive at on average past --body-rate-grace-secs (and at least the rate that brings it within --body-read-timeout-secs), or be cut with 408; 0: no such rate"),
		secondsFlag("body-rate-grace-secs", p.Edge.BodyRateGrace, "seconds a request body has before --min-body-rate applies"),
		stringFlag("log-level", defaultLogLevel, "debug, info, warn (or warning), error (or critical)"),
		stringFlag("log-dir", "", fmt.Sprintf("also write the log to a file a day in this directory (the last %d kept)", logDaysKept)),
		boolFlag("log-json", "log as JSON lines (one per request at INFO, besides the replica's own events)"),
		stringFlag("node-name", "", "this replica's name in the cluster (default: the host name)"),
		stringFlag("data-dir", "", "where Raft keeps its log and snapshots (default: <user cache dir>/kvrouter/<node-name>)"),
		stringFlag("gossip-bind", d.GossipBind, "memberlist host:port"),
		stringFlag("gossip-advertise", "", "memberlist host:port other replicas reach (default: --gossip-bind)"),
		stringFlag("raft-bind", d.RaftBind, "Raft host:port"),
		stringFlag("raft-advertise", "", "Raft host:port other replicas reach (default: --raft-bind)"),
		sliceFlag("join", "memberlist host:port of a running replica (repeatable)"),
		intFlag("bootstrap-expect", d.BootstrapExpect, "replicas that form the voter set"),
		stringFlag("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip, and from which the seals of stored responses' owners are derived"),
		stringFlag("admin-token", "", "bearer token of the admin API; without one only loopback clients may use it (ROUTER_ADMIN_TOKEN or --admin-token-file keep it out of ps)"),
		stringFlag("admin-token-file", "", "file whose content is --admin-token"),
		stringFlag("cluster-tls-cert", "", "PEM certificate this replica presents to its peers (see: router tls init)"),
		stringFlag("cluster-tls-key", "", "PEM key of --cluster-tls-cert"),
		stringFlag("cluster-tls-ca", "", "PEM certificate of the CA that signs every replica's; peers without one are refused"),
		boolFlag("insecure-cluster", "allow gossip or Raft binds beyond loopback without --gossip-key and cluster TLS"),
		boolFlag("enable-trace", "OpenTelemetry spans per request and per upstream attempt, exported by OTLP/HTTP (to --otlp-traces-endpoint, else $OTEL_EXPORTER_OTLP_ENDPOINT)"),
		withAliases(stringFlag("otlp-traces-endpoint", "", "OTLP/HTTP collector (host:port, or a URL); setting it turns tracing on"),
			"otlp-endpoint"),
		floatFlag("otel-sampling-ratio", defaultSamplingRatio, "share of traces sampled, parent-based"),
		sliceFlag("otel-excluded-paths", "paths without spans (only the inference API is traced; accepted as vllm-router has it)"),
		&cli.BoolFlag{Name: "version", Aliases: []string{"V"}, Usage: "print the version and exit"},
		durationFlag("raft-heartbeat-timeout", d.RaftTimings.Heartbeat, "how long a follower goes without the leader before it stands for election"),
		durationFlag("raft-election-timeout", d.RaftTimings.Election, "how long a candidate waits for votes before it tries again"),
		durationFlag("raft-leader-lease-timeout", d.RaftTimings.LeaderLease, "how long a leader goes without a quorum before it steps down (at most the heartbeat timeout)"),
		durationFlag("raft-commit-timeout", d.RaftTimings.Commit, "how long the leader waits before sending entries it has not batched"),
		&cli.BoolFlag{Name: "placer", Value: d.Placer, EnvVars: env("placer"), Usage: "a replica that knows nothing of a request's prefix, or only a prefix the request shares with others and leaves (a new session on a shared system prompt), asks the Raft leader which worker to take, so that the tier places its new sessions and bursts on one view (one round trip on the cluster port, only for those requests; without an answer in 50ms, or 150ms while the leader is answering or before its first answer, it decides alone)"},
		durationFlag("gossip-flush-interval", d.GossipFlushInterval, "how soon after its last load report a replica whose loads changed reports again; 100ms or more: only every 100ms, for about a seventh of the gossip's packets in a busy tier"),
		durationFlag("reap-timeout", d.ReapTimeout, "how long a replica may be out of the gossip, and silent, before the leader removes it from Raft"),
		durationFlag("join-timeout", d.JoinTimeout, "how long a starting replica keeps trying --join before it gives up"),
		durationFlag("worker-connect-timeout", p.DialTimeout, "bound on connecting to a worker"),
		durationFlag("worker-idle-timeout", p.WorkerIdleTimeout, "how long a pooled connection to a worker may stay idle and be reused; keep it below the workers' own keep-alive timeout (5s in vLLM and SGLang)"),
	}
}

// notGiven is the default of a per-role threshold flag: the role takes the
// global flag's value.
const notGiven = -1

// withAliases gives f the other names vllm-router users type.
func withAliases(f cli.Flag, aliases ...string) cli.Flag {
	switch f := f.(type) {
	case *cli.IntFlag:
		f.Aliases = aliases
	case *cli.StringFlag:
		f.Aliases = aliases
	default:
		panic(fmt.Sprintf("withAliases: %T", f))
	}
	return f
}
