package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/cluster/discovery"
	"github.com/kvrouter/kvrouter/cluster/health"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/internal/workerurl"
	"github.com/kvrouter/kvrouter/proxy"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:         "serve",
		Usage:        "run a router replica",
		Flags:        serveFlags(),
		Action:       serve,
		OnUsageError: nameTheFlag,
	}
}

// flagInParseError finds the flag named by the parser's errors: Go's flag
// package says "invalid value %q for flag -name: ...", urfave/cli says
// "could not parse %q as ... for flag name: ..." of an environment variable.
var flagInParseError = regexp.MustCompile(`for flag -?([A-Za-z0-9][A-Za-z0-9-]*)`)

// nameTheFlag makes a value the parser refused (a duration without its
// unit, a word for a number) name its flag as every other refusal does,
// "--name: ...", and shows the command's usage as the parser would.
func nameTheFlag(c *cli.Context, err error, _ bool) error {
	if m := flagInParseError.FindStringSubmatch(err.Error()); m != nil {
		err = fmt.Errorf("--%s: %w", m[1], err)
	}
	fmt.Fprintf(c.App.Writer, "Incorrect Usage: %v\n\n", err)
	if c.Command != nil {
		_ = cli.ShowCommandHelp(c, c.Command.Name)
	}
	return err
}

func serve(c *cli.Context) error {
	if c.Bool("version") {
		fmt.Fprintln(c.App.Writer, version)
		return nil
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	noticeCompatFlags(c, cfg.Logger)
	found, err := discoveryFrom(c, cfg.Logger)
	if err != nil {
		return err
	}
	var pods discovery.PodSource
	if found != nil {
		if pods, err = inClusterPods(); err != nil {
			return err
		}
	}
	tracer, flushTraces, err := tracerFrom(c, cfg.NodeName)
	if err != nil {
		return err
	}
	cfg.Tracer = tracer
	defer func() { _ = flushTraces(context.Background()) }() // the spans still batched
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP is caught from now on: its default action would end the
	// process, and one may come while the replica starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	r, err := cluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if c.String("api-keys") != "" {
		r.OnReload("API keys", func() error { return reloadAPIKeys(c, r) })
	}
	go reloadOnHangup(ctx, hup, r)
	stopDiscovery := func() {}
	if found != nil {
		watch, cancelWatch := context.WithCancel(ctx)
		wait, err := runDiscovery(watch, found, pods, r, cfg.Proxy.WorkerHosts.Allows, cfg.Logger)
		if err != nil {
			cancelWatch()
			return errors.Join(err, r.Stop(context.Background()))
		}
		stopDiscovery = func() { cancelWatch(); wait() }
	}
	cfg.Logger.Info("router ready", "addr", r.HTTPAddr(), "node", cfg.NodeName, "data_dir", cfg.DataDir)
	var failure error
	select {
	case <-ctx.Done():
	case failure = <-r.Failed():
	}
	cfg.Logger.Info("shutting down")
	stopDiscovery()
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(failure, r.Stop(shutdown))
}

// configFrom turns the flags into a replica's config, refusing bad values
// with a message that names the flag.
func configFrom(c *cli.Context) (cluster.Config, error) {
	logger, err := newLogger(c.String("log-level"), c.String("log-dir"), c.String("node-name"), c.Bool("log-json"))
	if err != nil {
		return cluster.Config{}, err
	}
	cfg := cluster.Config{
		Release:         version,
		HTTPAddr:        net.JoinHostPort(c.String("host"), strconv.Itoa(c.Int("port"))),
		NodeName:        c.String("node-name"),
		DataDir:         c.String("data-dir"),
		RaftBind:        c.String("raft-bind"),
		RaftAdvertise:   c.String("raft-advertise"),
		GossipBind:      c.String("gossip-bind"),
		GossipAdvertise: c.String("gossip-advertise"),
		Join:            c.StringSlice("join"),
		BootstrapExpect: c.Int("bootstrap-expect"),
		AdminToken:      c.String("admin-token"),
		ClusterTLS: link.TLSFiles{CertFile: c.String("cluster-tls-cert"), KeyFile: c.String("cluster-tls-key"),
			CAFile: c.String("cluster-tls-ca")},
		InsecureCluster: c.Bool("insecure-cluster"),
		Placer:          c.Bool("placer"),
		DebugAddr:       c.String("debug-addr"),
		Routing:         routingFrom(c),
		Proxy:           proxyConfigFrom(c),
		Health:          healthConfigFrom(c),
		Logger:          logger,
	}
	if p := c.Int("prometheus-port"); p != 0 {
		// Out of range is refused by Validate, naming the flag.
		cfg.MetricsAddr = net.JoinHostPort(c.String("prometheus-host"), strconv.Itoa(p))
	}
	if err := fillDefaults(&cfg); err != nil {
		return cfg, err
	}
	if err := secretsFrom(c, &cfg); err != nil {
		return cfg, err
	}
	if err := edgeFrom(c, &cfg.Proxy); err != nil {
		return cfg, err
	}
	if err := admissionFrom(c, &cfg.Proxy); err != nil {
		return cfg, err
	}
	if cfg.Seeds, err = seedsFrom(c, cfg.Proxy.WorkerHosts); err != nil {
		return cfg, err
	}
	if err := kvEventsFrom(c, &cfg); err != nil {
		return cfg, err
	}
	loraFrom(c, &cfg)
	if key := c.String("gossip-key"); key != "" {
		if cfg.GossipKey, err = base64.StdEncoding.DecodeString(key); err != nil || !validKeyLen(len(cfg.GossipKey)) {
			return cfg, fmt.Errorf("--gossip-key: want base64 of 16, 24 or 32 bytes")
		}
	}
	if err := clusterTimingsFrom(c, &cfg); err != nil {
		return cfg, err
	}
	if err := validate(c, cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// clusterTimingsFrom reads the Raft, reap, join and worker connect
// timeouts, refusing one that is not positive, naming its flag: in the
// config 0 means the default, on the command line it is a mistake.
func clusterTimingsFrom(c *cli.Context, cfg *cluster.Config) error {
	for flag, dst := range map[string]*time.Duration{
		"raft-heartbeat-timeout": &cfg.RaftTimings.Heartbeat, "raft-election-timeout": &cfg.RaftTimings.Election,
		"raft-leader-lease-timeout": &cfg.RaftTimings.LeaderLease, "raft-commit-timeout": &cfg.RaftTimings.Commit,
		"reap-timeout": &cfg.ReapTimeout, "gossip-flush-interval": &cfg.GossipFlushInterval, "join-timeout": &cfg.JoinTimeout, "worker-connect-timeout": &cfg.Proxy.DialTimeout,
		"worker-idle-timeout": &cfg.Proxy.WorkerIdleTimeout,
	} {
		if *dst = c.Duration(flag); *dst <= 0 {
			return fmt.Errorf("--%s: want a positive duration such as 2s (got %v)", flag, *dst)
		}
	}
	return nil
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

func fillDefaults(cfg *cluster.Config) error {
	if cfg.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name: cannot read the host name: %w", err)
		}
		cfg.NodeName = host
	}
	if cfg.DataDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("--data-dir: no user cache dir to default to: %w", err)
		}
		cfg.DataDir = filepath.Join(cache, "kvrouter", cfg.NodeName)
	}
	if cfg.RaftAdvertise == "" {
		cfg.RaftAdvertise = cfg.RaftBind
	}
	if cfg.GossipAdvertise == "" {
		cfg.GossipAdvertise = cfg.GossipBind
	}
	return nil
}

func routingFrom(c *cli.Context) cluster.Routing {
	r := cluster.DefaultRouting()
	r.Policy = policyName(c.String("policy"))
	r.MissPlacement = c.String("miss-placement")
	r.Thresholds.CacheThreshold = c.Float64("cache-threshold")
	r.Thresholds.BalanceAbs = c.Float64("balance-abs-threshold")
	r.Thresholds.BalanceRel = c.Float64("balance-rel-threshold")
	r.Thresholds.HotLoad = c.Float64("hot-prefix-load")
	r.Thresholds.HotOwners = c.Int("hot-prefix-owners")
	r.BlockSize = c.Int("block-size")
	r.MaxTreeSize = c.Int64("max-tree-size")
	r.EvictionInterval = seconds(c, "eviction-interval")
	r.PrefixTTL = c.Duration("prefix-ttl")
	switch {
	case c.Bool("vllm-pd-disaggregation"):
		r.PD = "vllm"
	case c.Bool("pd-disaggregation"):
		r.PD = "sglang"
	}
	r.PrefillPolicy, r.DecodePolicy = policyName(c.String("prefill-policy")), policyName(c.String("decode-policy"))
	// Role thresholds default to the global ones, whatever policy the role uses.
	r.PrefillThresholds = overrideThresholds(r.Thresholds, c.Float64("prefill-cache-threshold"),
		c.Float64("prefill-balance-abs-threshold"), c.Float64("prefill-balance-rel-threshold"))
	r.DecodeThresholds = overrideThresholds(r.Thresholds, notGiven,
		c.Float64("decode-balance-abs-threshold"), c.Float64("decode-balance-rel-threshold"))
	r.PrefillMissPlacement = r.MissPlacement
	return r
}

// policyName reads a --policy value: vllm-router's rendezvous_hash is a
// sticky hash of the session key, which consistent_hash is here.
func policyName(name string) string {
	if name == "rendezvous_hash" {
		return "consistent_hash"
	}
	return name
}

// overrideThresholds returns base with the role's values where they were
// given (a negative value, such as notGiven, means "not given").
func overrideThresholds(base cluster.Thresholds, cache, abs, rel float64) cluster.Thresholds {
	if cache >= 0 {
		base.CacheThreshold = cache
	}
	if abs >= 0 {
		base.BalanceAbs = abs
	}
	if rel >= 0 {
		base.BalanceRel = rel
	}
	return base
}

func proxyConfigFrom(c *cli.Context) proxy.Config {
	p := proxy.DefaultConfig()
	p.MaxPayloadSize = int(c.Int64("max-payload-size"))
	p.MaxResponseSize = int(c.Int64("max-response-size"))
	p.RequestTimeout = seconds(c, "request-timeout-secs")
	p.Admission = admission.Config{Capacity: c.Int("max-concurrent-requests"), QueueSize: c.Int("queue-size"),
		RefillPerSec: c.Float64("rate-limit-tokens-per-second"), QueueTimeout: seconds(c, "queue-timeout-secs")}
	p.CORSOrigins = c.StringSlice("cors-allowed-origins")
	p.Retry.MaxAttempts = c.Int("retry-max-retries")
	if c.Bool("disable-retries") {
		p.Retry.MaxAttempts = 1
	}
	p.Migration = proxy.Migration{Limit: c.Int("migration-limit"), BufferBytes: int(c.Int64("migration-buffer-bytes")),
		TotalBytes: c.Int64("migration-buffer-total-bytes")}
	p.Retry.InitialBackoff = millis(c, "retry-initial-backoff-ms")
	p.Retry.MaxBackoff = millis(c, "retry-max-backoff-ms")
	p.Retry.Multiplier = c.Float64("retry-backoff-multiplier")
	p.Retry.Jitter = c.Float64("retry-jitter-factor")
	if h := c.StringSlice("request-id-headers"); len(h) > 0 {
		p.RequestIDHeaders = h
	}
	p.APIKey = c.String("api-key")
	p.BlockSize = c.Int("block-size")
	p.TLSCertPath, p.TLSKeyPath = c.String("tls-cert-path"), c.String("tls-key-path")
	p.Edge = proxy.Edge{HeaderReadTimeout: seconds(c, "header-read-timeout-secs"), BodyReadTimeout: seconds(c, "body-read-timeout-secs"),
		WriteTimeout: seconds(c, "write-timeout-secs"), IdleTimeout: seconds(c, "idle-timeout-secs"),
		MaxConnections: c.Int("max-connections"), MaxHeaderSize: c.Int("max-header-size"),
		MaxBufferedBodyBytes: c.Int64("max-buffered-body-bytes"), MaxBodyShare: c.Float64("max-body-share"),
		MinBodyRate: c.Int("min-body-rate"), BodyRateGrace: seconds(c, "body-rate-grace-secs")}
	if p.Edge.MinBodyRate == 0 {
		p.Edge.MinBodyRate = -1 // the flag's 0 is none; the config's, the default
	}
	if p.Edge.BodyRateGrace == 0 {
		p.Edge.BodyRateGrace = -1
	}
	return p
}

// edgeFrom reads what proxyConfigFrom cannot fail on: the API keys and the
// worker host policy.
func edgeFrom(c *cli.Context, p *proxy.Config) error {
	var err error
	if p.APIKeys, err = readAPIKeys(c.String("api-keys")); err != nil {
		return err
	}
	if p.WorkerHosts, err = workerurl.ParseHostPolicy(c.StringSlice("allowed-worker-hosts")); err != nil {
		return fmt.Errorf("--allowed-worker-hosts: %w", err)
	}
	if (p.TLSCertPath == "") != (p.TLSKeyPath == "") {
		return fmt.Errorf("--tls-cert-path and --tls-key-path go together")
	}
	for _, name := range []string{"header-read-timeout-secs", "body-read-timeout-secs", "write-timeout-secs",
		"idle-timeout-secs", "max-connections", "max-header-size"} {
		if c.Int(name) <= 0 {
			return fmt.Errorf("--%s: must be positive", name)
		}
	}
	if err := bodyBudgetFlags(c); err != nil {
		return err
	}
	if err := migrationFlags(c); err != nil {
		return err
	}
	if c.Float64("rate-limit-tokens-per-second") < 0 {
		return fmt.Errorf("--rate-limit-tokens-per-second: must not be negative")
	}
	return nil
}

// migrationFlags refuses a negative limit and buffers that hold nothing, or
// a stream's buffer larger than the replica's.
func migrationFlags(c *cli.Context) error {
	stream, total := c.Int64("migration-buffer-bytes"), c.Int64("migration-buffer-total-bytes")
	switch {
	case c.Int("migration-limit") < 0:
		return fmt.Errorf("--migration-limit: must not be negative (0 turns migration off)")
	case stream <= 0:
		return fmt.Errorf("--migration-buffer-bytes: must be positive")
	case total < stream:
		return fmt.Errorf("--migration-buffer-total-bytes: %d is less than --migration-buffer-bytes %d", total, stream)
	}
	return nil
}

// bodyBudgetFlags refuses a budget of bodies held in which a body of the
// largest size could never be read, a share that is none or more than all,
// and negative rates.
func bodyBudgetFlags(c *cli.Context) error {
	held, payload, share := c.Int64("max-buffered-body-bytes"), c.Int64("max-payload-size"), c.Float64("max-body-share")
	switch {
	case held < payload:
		return fmt.Errorf("--max-buffered-body-bytes: %d is less than --max-payload-size %d: a body of the largest size could never be held", held, payload)
	case !(share > 0 && share <= 1):
		return fmt.Errorf("--max-body-share: want a share in (0, 1], got %v", share)
	case c.Int("min-body-rate") < 0:
		return fmt.Errorf("--min-body-rate: must not be negative (0: no such rate)")
	case c.Int("body-rate-grace-secs") < 0:
		return fmt.Errorf("--body-rate-grace-secs: must not be negative")
	}
	return nil
}

func healthConfigFrom(c *cli.Context) health.Config {
	h := health.DefaultConfig()
	h.Interval = seconds(c, "health-check-interval-secs")
	h.Timeout = seconds(c, "health-check-timeout-secs")
	if !c.IsSet("health-check-timeout-secs") {
		// The default timeout fits any interval: a short interval alone is no error.
		h.Timeout = min(h.Timeout, h.Interval)
	}
	h.FailureThreshold = c.Int("health-failure-threshold")
	h.SuccessThreshold = c.Int("health-success-threshold")
	h.Endpoint = c.String("health-check-endpoint")
	h.CBFailureThreshold = c.Int("cb-failure-threshold")
	h.CBSuccessThreshold = c.Int("cb-success-threshold")
	h.CBTimeout = seconds(c, "cb-timeout-duration-secs")
	h.WedgeTimeout = c.Duration("wedge-timeout")
	h.DegradeWindow = c.Duration("degrade-window")
	h.DegradeRatio = c.Float64("degrade-ratio")
	h.APIKey = c.String("api-key")
	h.DisableCircuitBreaker = c.Bool("disable-circuit-breaker")
	h.EngineScrapeInterval = seconds(c, "engine-scrape-interval-secs")
	return h
}

var portOrNone = regexp.MustCompile(`^([0-9]+|none)$`)

// seedsFrom reads --worker-urls, --prefill and --decode. A --prefill URL may
// be followed by its bootstrap port or "none", as in vllm-router.
func seedsFrom(c *cli.Context, hosts workerurl.HostPolicy) ([]cluster.Seed, error) {
	seeds, err := seedFlags(c)
	if err != nil {
		return nil, err
	}
	for _, s := range seeds {
		if err := hosts.Allows(s.URL); err != nil {
			return nil, fmt.Errorf("--%s: %s: %w", seedFlag(s.Role), s.URL, err)
		}
	}
	return seeds, nil
}

func seedFlag(role string) string {
	switch role {
	case proxy.RolePrefill, proxy.RoleDecode:
		return role
	}
	return "worker-urls"
}

func seedFlags(c *cli.Context) ([]cluster.Seed, error) {
	var seeds []cluster.Seed
	for _, u := range c.StringSlice("worker-urls") {
		if err := checkURL("worker-urls", u); err != nil {
			return nil, err
		}
		seeds = append(seeds, cluster.Seed{URL: u, Role: proxy.RoleRegular})
	}
	prefill := c.StringSlice("prefill")
	for i := 0; i < len(prefill); i++ {
		s := cluster.Seed{URL: prefill[i], Role: proxy.RolePrefill}
		if err := checkURL("prefill", s.URL); err != nil {
			return nil, err
		}
		if i+1 < len(prefill) && portOrNone.MatchString(prefill[i+1]) {
			if p, err := strconv.Atoi(prefill[i+1]); err == nil {
				s.BootstrapPort = p
			}
			i++
		}
		seeds = append(seeds, s)
	}
	for _, u := range c.StringSlice("decode") {
		if err := checkURL("decode", u); err != nil {
			return nil, err
		}
		seeds = append(seeds, cluster.Seed{URL: u, Role: proxy.RoleDecode})
	}
	return seeds, nil
}

func checkURL(flag, u string) error {
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("--%s: %q is not an http:// or https:// URL", flag, u)
	}
	return nil
}

// validate checks what the cluster config cannot check on its own.
func validate(c *cli.Context, cfg cluster.Config) error {
	if p := c.Int("port"); p < 0 || p > 65535 {
		return fmt.Errorf("--port: %d is not a port", p)
	}
	if c.Bool("vllm-pd-disaggregation") && c.Bool("pd-disaggregation") {
		return fmt.Errorf("--vllm-pd-disaggregation and --pd-disaggregation exclude each other")
	}
	return cfg.Validate()
}

// defaultLogLevel is --log-level's default, vllm-router's.
const defaultLogLevel = "info"

// logLevels maps vllm-router's Python spellings onto slog's.
var logLevels = map[string]string{"warning": "warn", "critical": "error"}

// newLogger logs at level to stderr, as text or JSON, and with --log-dir
// to a file a day there as well.
func newLogger(level, dir, node string, asJSON bool) (*slog.Logger, error) {
	if alias, ok := logLevels[strings.ToLower(level)]; ok {
		level = alias
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	var out io.Writer = os.Stderr
	if dir != "" {
		name := "router.log"
		if node != "" {
			name = "router-" + filepath.Base(node) + ".log"
		}
		f, err := openDailyFile(dir, name, logDaysKept, time.Now)
		if err != nil {
			return nil, fmt.Errorf("--log-dir: %w", err)
		}
		out = io.MultiWriter(os.Stderr, f)
	}
	opts := &slog.HandlerOptions{Level: l}
	if asJSON {
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return slog.New(slog.NewTextHandler(out, opts)), nil
}

// logDaysKept is how many daily files --log-dir keeps.
const logDaysKept = 7

// normalizeArgs rewrites vllm-router's two-value form `--prefill URL PORT`
// into `--prefill URL,PORT`, which the flag parser reads as one flag.
func normalizeArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if (args[i] == "--prefill" || args[i] == "-prefill") && i+2 < len(args) && portOrNone.MatchString(args[i+2]) {
			out = append(out, args[i], args[i+1]+","+args[i+2])
			i += 2
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// reloadOnHangup makes every SIGHUP reread, until ctx ends, what can change
// without a restart: the cluster and client certificates, and the API keys
// (see Replica.Reload, which logs what it did; a part that fails keeps its
// previous state).
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, r *cluster.Replica) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.Reload()
		}
	}
}

// reloadAPIKeys rereads --api-keys into r, when it was given: a file's
// keys may change while the replica runs.
func reloadAPIKeys(c *cli.Context, r *cluster.Replica) error {
	keys, err := readAPIKeys(c.String("api-keys"))
	if err != nil {
		return err
	}
	r.SetAPIKeys(keys)
	return nil
}
