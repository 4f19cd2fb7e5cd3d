package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// flagCategory is one concern of `router serve`'s flags: its heading in
// --help and in docs/configuration.md, what it is about, and its flags in
// the order the reference lists them.
type flagCategory struct {
	name  string
	about string
	flags []string
}

// flagCategories are the concerns in the order the reference reads them.
// --help lists the same groups alphabetically (urfave/cli sorts them).
var flagCategories = []flagCategory{
	{"Listening and clients", "Where the replica listens and what it takes from a client before a request is routed.",
		[]string{"host", "port", "max-connections", "max-header-size", "header-read-timeout-secs", "body-read-timeout-secs",
			"write-timeout-secs", "idle-timeout-secs", "max-payload-size", "max-buffered-body-bytes", "max-body-share",
			"min-body-rate", "body-rate-grace-secs", "request-id-headers", "cors-allowed-origins"}},
	{"Workers", "Which workers the tier routes to and how a replica talks to them.",
		[]string{"worker-urls", "allowed-worker-hosts", "api-key", "api-key-file", "worker-connect-timeout", "worker-idle-timeout",
			"max-response-size", "service-discovery", "selector", "prefill-selector", "decode-selector",
			"service-discovery-port", "service-discovery-namespace", "engine-scrape-interval-secs"}},
	{"Routing", "How a request's worker is chosen: the prefix ownership index, the per-request overload check, hot prefixes and the placement of new sessions.",
		[]string{"policy", "miss-placement", "cache-threshold", "balance-abs-threshold", "balance-rel-threshold",
			"hot-prefix-load", "hot-prefix-owners", "block-size", "max-tree-size", "eviction-interval", "prefix-ttl", "placer"}},
	{"Prefill/decode disaggregation", "Routing the prefill and the decode of a request to different workers.",
		[]string{"vllm-pd-disaggregation", "pd-disaggregation", "prefill", "decode", "prefill-policy", "decode-policy",
			"prefill-cache-threshold", "prefill-balance-abs-threshold", "prefill-balance-rel-threshold",
			"decode-balance-abs-threshold", "decode-balance-rel-threshold"}},
	{"KV events", "Routing on the blocks the engines say they hold (vLLM's KV cache events over ZMQ).",
		[]string{"kv-events", "kv-events-endpoints", "kv-events-bind", "kv-events-block-size", "kv-events-max-blocks",
			"kv-events-replay-offset", "kv-events-stale-after", "kv-events-reservation", "kv-events-tokenize-timeout",
			"kv-events-tokenize-cache-bytes", "kv-events-max-message-bytes", "kv-events-keep-tokens-alone"}},
	{"LoRA adapters", "Sending an adapter's requests where it is resident.",
		[]string{"lora-residency", "lora-load-path"}},
	{"Failures, retries and health", "What a replica does when a worker fails, stops making progress or slows down.",
		[]string{"request-timeout-secs", "retry-max-retries", "retry-initial-backoff-ms", "retry-max-backoff-ms",
			"retry-backoff-multiplier", "retry-jitter-factor", "disable-retries", "migration-limit", "migration-buffer-bytes",
			"migration-buffer-total-bytes", "disable-circuit-breaker",
			"cb-failure-threshold", "cb-success-threshold", "cb-timeout-duration-secs", "health-check-interval-secs",
			"health-check-timeout-secs", "health-failure-threshold", "health-success-threshold", "health-check-endpoint",
			"wedge-timeout", "degrade-window", "degrade-ratio"}},
	{"Admission and priority", "How many requests are let in, in which order, and how tenants share the engines.",
		[]string{"max-concurrent-requests", "rate-limit-tokens-per-second", "queue-size", "queue-timeout-secs",
			"priority-classes", "priority-default-class", "priority-reserved", "engine-priority", "lend-reserved-slots", "preempt-by-resume",
			"api-key-classes", "api-key-tenants", "tenant-header", "tenant-max-inflight", "disable-tier-fairness",
			"saturation-kv-usage"}},
	{"Keys and TLS", "Who may call the API and the admin API, and the client listener's TLS (see SECURITY.md).",
		[]string{"api-keys", "admin-token", "admin-token-file", "tls-cert-path", "tls-key-path"}},
	{"Cluster", "The replicas of a tier: memberlist gossip, Raft membership and their security.",
		[]string{"node-name", "data-dir", "join", "bootstrap-expect", "join-timeout", "gossip-bind", "gossip-advertise",
			"raft-bind", "raft-advertise", "gossip-key", "cluster-tls-cert", "cluster-tls-key", "cluster-tls-ca",
			"insecure-cluster", "gossip-flush-interval", "reap-timeout", "raft-heartbeat-timeout",
			"raft-election-timeout", "raft-leader-lease-timeout", "raft-commit-timeout"}},
	{"Observability", "Logs, metrics, traces and profiles.",
		[]string{"log-level", "log-dir", "log-json", "prometheus-host", "prometheus-port", "enable-trace",
			"otlp-traces-endpoint", "otel-sampling-ratio", "otel-excluded-paths", "debug-addr", "version"}},
}

// compatCategory holds vllm-router's flags that have no counterpart here.
var compatCategory = flagCategory{name: "vllm-router compatibility",
	about: "vllm-router's flags with no counterpart here: accepted so that its command lines start this router unchanged; the router logs once at start what it does instead."}

// categorized files every flag of fs under its category, for --help; a
// flag no category names is a programming error, caught by any test that
// builds the command.
func categorized(fs []cli.Flag) []cli.Flag {
	of := map[string]string{}
	for _, c := range flagCategories {
		for _, name := range c.flags {
			of[name] = c.name
		}
	}
	for _, f := range compatibleFlags {
		of[f.flag.Names()[0]] = compatCategory.name
	}
	for _, f := range fs {
		name := f.Names()[0]
		category, ok := of[name]
		if !ok {
			panic(fmt.Sprintf("--%s is in no category of flagCategories", name))
		}
		setCategory(f, category)
	}
	return fs
}

func setCategory(f cli.Flag, category string) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Category = category
	case *cli.StringSliceFlag:
		f.Category = category
	case *cli.IntFlag:
		f.Category = category
	case *cli.Int64Flag:
		f.Category = category
	case *cli.Float64Flag:
		f.Category = category
	case *cli.BoolFlag:
		f.Category = category
	case *cli.DurationFlag:
		f.Category = category
	default:
		panic(fmt.Sprintf("setCategory: %T", f))
	}
}
