package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"
)

// Config is everything a replica is started with. The command line fills it;
// Validate refuses a bad combination before anything starts, naming the flag.
type Config struct {
	// HTTPAddr is where the API, health, metrics and admin endpoints listen
	// (--host, --port).
	HTTPAddr string
	// MetricsAddr, when set, also serves /metrics there (--prometheus-host,
	// --prometheus-port).
	MetricsAddr string
	// DebugAddr, when set, serves Go's runtime profiles (net/http/pprof)
	// there (--debug-addr, default off); only a loopback address is
	// accepted.
	DebugAddr string

	// Release names this build ("v0.2.0"), announced to the peers in the
	// gossip metadata with the wire versions it speaks (wires.go), and
	// named when a peer of a build that cannot share the tier is refused.
	Release string

	NodeName string // --node-name, default the host name
	DataDir  string // --data-dir: the Raft log, stable store and snapshots
	// RaftBind and RaftAdvertise are the Raft transport's host:port. An
	// empty RaftAdvertise, or one with port 0, means the bound address.
	RaftBind, RaftAdvertise string
	// GossipBind and GossipAdvertise are memberlist's host:port. An empty
	// GossipAdvertise, or one with port 0, means the bound address.
	GossipBind, GossipAdvertise string
	// Join lists memberlist addresses of running replicas (--join). A
	// replica with neither Join nor BootstrapExpect > 1 bootstraps a
	// one-node cluster.
	Join []string
	// BootstrapExpect is how many replicas form the voter set (default
	// 1): the first that many to find each other bootstrap Raft together;
	// later ones join as non-voters.
	BootstrapExpect int
	GossipKey       []byte // AES key (16, 24 or 32 bytes); nil = no encryption
	// AdminToken is the bearer token of the admin API; "" = loopback
	// clients only. Replicas forward registry writes to the leader over the
	// cluster port, not the admin API, so each replica may have its own.
	AdminToken string
	// ClusterTLS, when set, makes every link between replicas (Raft and
	// forwarded writes, on the --raft-bind port) mutual TLS with the
	// cluster CA (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca).
	// The files are read again at Reload (SIGHUP).
	ClusterTLS link.TLSFiles
	// InsecureCluster lets a replica whose gossip, Raft or API bind is not
	// loopback start without GossipKey or ClusterTLS (--insecure-cluster):
	// the operator trusts everyone on the network.
	InsecureCluster bool
	// CountOwnBurstOnce turns off the peers' expected share of this
	// replica's burst (affinity.LoadTable.SetPeerShare), which every
	// replica otherwise counts in the load it selects on: a replica's own
	// requests then count once until the peers' reports arrive. For tests
	// that make a worker hot through one replica; no flag sets it.
	CountOwnBurstOnce bool

	// ReapTimeout is how long a replica may stay out of the gossip
	// membership (dead or left), and silent, before the leader removes it
	// from the Raft configuration (--reap-timeout). Default
	// DefaultReapTimeout (30 s). One that comes back later is added again.
	ReapTimeout time.Duration
	// GossipFlushInterval is how soon after its last load report a
	// replica whose loads changed reports again (--gossip-flush-interval;
	// loadsync.Config.LoadFlushInterval). Default
	// loadsync.DefaultLoadFlushInterval; 100ms or more reports only every
	// 100 ms, for about a seventh of the gossip's packets in a busy tier.
	GossipFlushInterval time.Duration
	// Placer makes the Raft leader the tier's placer (--placer): a replica
	// that knows nothing of a request's prefix asks the leader for its
	// worker (placer.go). On by default (DefaultConfig): on real processes
	// it cut the tier's TTFT on the bursty trace by about a third of the
	// gap and kept agentic sessions' worst round at one replica's cached
	// tokens; in fleetsim it brought RL rollout bursts to one replica's
	// throughput (BENCHMARKS.md, "The placer").
	Placer bool
	// PlacerTimeout bounds asking the placer; zero is 50 ms. For tests on a
	// loaded machine; no flag sets it.
	PlacerTimeout time.Duration
	// ReconcileInterval is how often membership is checked against Raft
	// (besides every membership event). Default 1 s.
	ReconcileInterval time.Duration
	// Stabilization is how long a non-voter must have been live at its
	// address before the leader promotes it to refill the voters. Zero is
	// membership.DefaultStabilization (10 s); no flag sets it.
	Stabilization time.Duration
	// Clock is the time the replica's own loops read (membership, rejoin,
	// seeding, readiness, the sweeps); nil is the real clock. For tests;
	// no flag sets it.
	Clock clock.WithTicker
	// JoinTimeout is how long Start keeps trying --join while none of its
	// addresses answers (replicas of a new cluster start in any order)
	// before it gives up with an error (--join-timeout). Default
	// DefaultJoinTimeout (30 s). Once started, a replica that sees fewer
	// members than the Raft configuration holds keeps re-joining, without
	// end (membership.RunRejoin).
	JoinTimeout time.Duration
	// RaftTimings are Raft's timeouts (--raft-heartbeat-timeout,
	// --raft-election-timeout, --raft-leader-lease-timeout,
	// --raft-commit-timeout); zero fields take the defaults.
	RaftTimings raftnode.Timings
	// GossipLocal uses memberlist's timings for one host or a fast local
	// network: failures are detected in about 3 s instead of about 10 s,
	// at the cost of more probe traffic. For tests and demos.
	GossipLocal bool

	// Seeds are added to the registry once per registry (--worker-urls,
	// --prefill, --decode): the first replica to seed a registry registers
	// them, and the registry records that it was seeded, so a worker
	// removed through the admin API stays removed across restarts.
	Seeds []Seed

	Routing Routing
	Proxy   proxy.Config
	Health  health.Config
	// KVEvents is routing on the engines' KV events (--kv-events); off when
	// its Enabled is false.
	KVEvents KVEvents
	// LoRA is how requests of LoRA adapters are routed (lora.go).
	LoRA   LoRA
	Logger *slog.Logger
	// Tracer, when set, traces every inference request and upstream attempt
	// (--enable-trace, --otlp-traces-endpoint).
	Tracer trace.Tracer
}

// Defaults of the cluster settings that have no flag.
const (
	// DefaultReapTimeout is Config.ReapTimeout when unset: long enough for
	// a restart or a rescheduled container, short enough that a dead voter
	// does not hold a seat in the quorum for long.
	DefaultReapTimeout = 30 * time.Second
	// DefaultReconcileInterval is Config.ReconcileInterval when unset.
	DefaultReconcileInterval = time.Second
	// DefaultJoinTimeout is Config.JoinTimeout when unset.
	DefaultJoinTimeout = 30 * time.Second
)

// DefaultConfig returns what `router serve` runs with when no flag is
// given, and the flags take their defaults from it: each field's documented
// default, the proxy's, the health monitor's and the routing's included,
// with the settings the command line turns on by default (priority classes,
// engine scrapes, the extra metrics listener). Node name, data dir, seeds
// and secrets have none. A test that starts from it picks its own ports.
func DefaultConfig() Config {
	c := Config{
		HTTPAddr:            "127.0.0.1:30000",
		MetricsAddr:         "127.0.0.1:29000",
		RaftBind:            "127.0.0.1:7947",
		GossipBind:          "127.0.0.1:7946",
		BootstrapExpect:     1,
		ReapTimeout:         DefaultReapTimeout,
		GossipFlushInterval: loadsync.DefaultLoadFlushInterval,
		ReconcileInterval:   DefaultReconcileInterval,
		JoinTimeout:         DefaultJoinTimeout,
		RaftTimings:         raftnode.DefaultTimings(),
		Routing:             DefaultRouting(),
		Proxy:               proxy.DefaultConfig(),
		Health:              health.DefaultConfig(),
		KVEvents:            DefaultKVEvents(),
		LoRA:                DefaultLoRA(),
		Placer:              true,
	}
	c.Proxy.BlockSize = c.Routing.BlockSize
	c.Proxy.Admission.Classes = slices.Clone(admission.DefaultClasses)
	c.Proxy.Admission.DefaultClass = admission.DefaultClass
	c.Health.EngineScrapeInterval = health.DefaultEngineScrapeInterval
	return c
}

func (c Config) withDefaults() Config {
	if c.ReapTimeout <= 0 {
		c.ReapTimeout = DefaultReapTimeout
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	return c
}

// Seed is a worker named on the command line.
type Seed struct {
	URL           string
	Role          string
	BootstrapPort int
	// KVEventsEndpoint is the engine's KV-event endpoint
	// (--kv-events-endpoints); "" is the default.
	KVEventsEndpoint string
}

// Routing configures selection. Every replica of a cluster must agree on
// BlockSize (a mismatch is refused at join); the policies, miss placement
// and thresholds here only seed a registry that has no routing config: the
// replicas route with the registry's copy (GET/PUT /cluster/routing).
type Routing struct {
	Policy        string              // --policy, default cache_aware
	MissPlacement string              // --miss-placement
	Thresholds    affinity.Thresholds // --cache-threshold, --balance-*-threshold
	BlockSize     int                 // --block-size, bytes, default 256
	// MaxTreeSize is each worker's budget in the ownership index, in bytes
	// of prefix (--max-tree-size, default 2^26).
	MaxTreeSize int64
	// EvictionInterval is how often the index is swept (--eviction-interval).
	EvictionInterval time.Duration
	// PrefixTTL, when positive, forgets ownership facts unused for that long
	// (--prefix-ttl); zero keeps them until the budget evicts them.
	PrefixTTL time.Duration
	// PD selects prefill/decode disaggregation: "" (off), "vllm" (sequential,
	// NIXL style) or "sglang" (concurrent, bootstrap style).
	PD                   string
	PrefillPolicy        string
	DecodePolicy         string
	PrefillThresholds    affinity.Thresholds
	DecodeThresholds     affinity.Thresholds
	PrefillMissPlacement string
}

// DefaultRouting returns the defaults of the routing flags.
func DefaultRouting() Routing {
	return Routing{
		Policy:           affinity.PolicyCacheAware,
		MissPlacement:    affinity.PlaceLeastPrefill,
		Thresholds:       affinity.DefaultThresholds(),
		BlockSize:        affinity.DefaultBlockSize,
		MaxTreeSize:      1 << 26,
		EvictionInterval: 120 * time.Second,
		PrefillPolicy:    affinity.PolicyCacheAware,
		DecodePolicy:     affinity.PolicyLeastLoad,
	}
}

// FlagError is a configuration error that names the flag at fault; the
// cluster TLS files' errors are of the same type.
type FlagError = link.FlagError

func flagErr(flag, format string, args ...any) error {
	return &FlagError{Flag: flag, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the routing settings.
func (r Routing) Validate() error {
	var errs []error
	if err := store.CheckBlockSize(r.BlockSize); err != nil {
		errs = append(errs, flagErr("block-size", "%v", err))
	}
	if r.MaxTreeSize < int64(r.BlockSize) {
		errs = append(errs, flagErr("max-tree-size", "must hold at least one block of %d bytes (got %d)", r.BlockSize, r.MaxTreeSize))
	}
	if r.EvictionInterval <= 0 {
		errs = append(errs, flagErr("eviction-interval", "must be positive"))
	}
	if r.PrefixTTL < 0 {
		errs = append(errs, flagErr("prefix-ttl", "must not be negative"))
	}
	errs = append(errs, validPolicy("policy", r.Policy), validPlacement("miss-placement", r.MissPlacement),
		validThresholds("", r.Thresholds))
	switch r.PD {
	case "":
	case "vllm", "sglang":
		errs = append(errs, validPolicy("prefill-policy", r.PrefillPolicy), validPolicy("decode-policy", r.DecodePolicy),
			validThresholds("prefill-", r.PrefillThresholds), validThresholds("decode-", r.DecodeThresholds))
	default:
		errs = append(errs, fmt.Errorf("unknown disaggregation mode %q", r.PD))
	}
	return errors.Join(errs...)
}

func validPolicy(flag, name string) error {
	for _, p := range affinity.PolicyNames {
		if p == name {
			return nil
		}
	}
	return flagErr(flag, "unknown policy %q (one of %v)", name, affinity.PolicyNames)
}

func validPlacement(flag, name string) error {
	if !slices.Contains(affinity.PlacementNames, name) {
		return flagErr(flag, "unknown miss placement %q (one of %v)", name, affinity.PlacementNames)
	}
	return nil
}

// validThresholds checks a role's thresholds with affinity's checks
// (Thresholds.Validate, which the registry's stored config and fleetsim
// use too), naming the flags under prefix. Hot-prefix spreading is the
// main role's alone (a role copies it, and has no flags of its own for it),
// so only the main role's is checked.
func validThresholds(prefix string, t affinity.Thresholds) error {
	if prefix != "" {
		t.HotLoad, t.HotOwners = 0, 0
	}
	err := t.Validate()
	if err == nil {
		return nil
	}
	var errs []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var te *affinity.ThresholdError
		if errors.As(e, &te) {
			errs = append(errs, flagErr(prefix+te.Flag, "%v", te.Err))
		}
	}
	return errors.Join(errs...)
}

// Thresholds are the cache-aware knobs of one role.
type Thresholds = affinity.Thresholds

// Validate refuses a configuration a replica cannot run with, naming the
// flag at fault.
func (c Config) Validate() error {
	errs := []error{c.Routing.Validate(), c.Health.Validate(), c.KVEvents.Validate(), c.LoRA.Validate()}
	if c.Proxy.MaxPayloadSize <= 0 {
		errs = append(errs, flagErr("max-payload-size", "must be positive"))
	}
	if c.Proxy.MaxResponseSize <= 0 {
		errs = append(errs, flagErr("max-response-size", "must be positive"))
	}
	if c.Proxy.RequestTimeout <= 0 {
		errs = append(errs, flagErr("request-timeout-secs", "must be positive"))
	}
	if err := c.Proxy.Admission.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Proxy.Retry.MaxAttempts < 1 {
		errs = append(errs, flagErr("retry-max-retries", "must be at least 1 (the first attempt counts)"))
	}
	if m := c.Proxy.Retry.Multiplier; m != 0 && m < 1 {
		errs = append(errs, flagErr("retry-backoff-multiplier", "must be at least 1 (got %v)", m))
	}
	if j := c.Proxy.Retry.Jitter; j < 0 || j > 1 {
		errs = append(errs, flagErr("retry-jitter-factor", "must be between 0 and 1 (got %v)", j))
	}
	if c.Proxy.Retry.InitialBackoff < 0 || c.Proxy.Retry.MaxBackoff < c.Proxy.Retry.InitialBackoff {
		errs = append(errs, flagErr("retry-max-backoff-ms", "must be at least --retry-initial-backoff-ms"))
	}
	if c.DebugAddr != "" {
		errs = append(errs, validDebugAddr(c.DebugAddr))
	}
	if c.BootstrapExpect < 1 {
		errs = append(errs, flagErr("bootstrap-expect", "must be at least 1"))
	}
	if c.ReapTimeout < 0 {
		errs = append(errs, flagErr("reap-timeout", "must not be negative"))
	}
	if c.GossipFlushInterval < 0 {
		errs = append(errs, flagErr("gossip-flush-interval", "must not be negative"))
	}
	if c.JoinTimeout < 0 {
		errs = append(errs, flagErr("join-timeout", "must not be negative"))
	}
	if c.Proxy.DialTimeout < 0 {
		errs = append(errs, flagErr("worker-connect-timeout", "must not be negative"))
	}
	errs = append(errs, c.RaftTimings.Validate())
	for flag, addr := range map[string]string{"raft-bind": c.RaftBind, "raft-advertise": c.RaftAdvertise,
		"gossip-bind": c.GossipBind, "gossip-advertise": c.GossipAdvertise} {
		if addr == "" && strings.HasSuffix(flag, "-advertise") {
			continue // the bound address
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, flagErr(flag, "want host:port (got %q)", addr))
		}
	}
	if len(c.GossipKey) != 0 && len(c.GossipKey) != 16 && len(c.GossipKey) != 24 && len(c.GossipKey) != 32 {
		errs = append(errs, flagErr("gossip-key", "want 16, 24 or 32 bytes (got %d)", len(c.GossipKey)))
	}
	errs = append(errs, c.ClusterTLS.Validate(), c.validateExposure(), validMetricsAddr(c.MetricsAddr))
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, flagErr("join", "want host:port (got %q)", j))
		}
	}
	if c.Routing.PD == "" {
		for _, s := range c.Seeds {
			if s.Role != "regular" {
				errs = append(errs, flagErr(s.Role, "needs --vllm-pd-disaggregation or --pd-disaggregation"))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// validMetricsAddr checks the --prometheus-host and --prometheus-port pair,
// when set; whether the port is free is known only by binding it (Start
// does that before anything else).
func validMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return flagErr("prometheus-host", "want a host (got %q)", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return flagErr("prometheus-port", "%q is not a port (1-65535; 0 for none)", port)
	}
	return nil
}
