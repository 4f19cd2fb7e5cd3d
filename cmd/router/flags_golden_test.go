package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/cluster/discovery"
)

// A golden test of the command line, as Consul's agent/config/runtime_test.go
// is one: every flag of `router serve` has a row below that says which config
// field it sets and what that field's default is in its package (or, for a
// flag with no config field, what its default is). A flag without a row, a
// row without a flag, a default in flags.go that is not its package's, and a
// flag the README's table does not list all fail here.

// flagDefault is the golden row of one flag.
type flagDefault struct {
	// field reads the config field the flag sets, from the config a command
	// line without flags gives; nil for a flag with no config field.
	field func(cluster.Config) any
	// want is the field's default in its package, or, when field is nil,
	// the flag's own default.
	want any
}

// sets is the row of a flag that sets a config field whose default is want.
func sets(field func(cluster.Config) any, want any) flagDefault {
	return flagDefault{field: field, want: want}
}

// declares is the row of a flag with no config field: its declared default
// must be want (a package's constant, or the literal of a setting that is
// the command line's own).
func declares(want any) flagDefault { return flagDefault{want: want} }

// goldenFlags are the rows, by flag name. cluster.DefaultConfig composes the
// packages' DefaultConfig functions (proxy, cluster/health, the routing).
func goldenFlags(t *testing.T) map[string]flagDefault {
	d := cluster.DefaultConfig()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	seeds := sets(func(c cluster.Config) any { return c.Seeds }, []cluster.Seed(nil))
	apiKey := sets(func(c cluster.Config) any { return [2]string{c.Proxy.APIKey, c.Health.APIKey} }, [2]string{})
	adminToken := sets(func(c cluster.Config) any { return c.AdminToken }, "")
	return map[string]flagDefault{
		"host":                          sets(func(c cluster.Config) any { return c.HTTPAddr }, d.HTTPAddr),
		"port":                          sets(func(c cluster.Config) any { return c.HTTPAddr }, d.HTTPAddr),
		"worker-urls":                   seeds,
		"policy":                        sets(func(c cluster.Config) any { return c.Routing.Policy }, d.Routing.Policy),
		"miss-placement":                sets(func(c cluster.Config) any { return c.Routing.MissPlacement }, d.Routing.MissPlacement),
		"cache-threshold":               sets(func(c cluster.Config) any { return c.Routing.Thresholds.CacheThreshold }, d.Routing.Thresholds.CacheThreshold),
		"balance-abs-threshold":         sets(func(c cluster.Config) any { return c.Routing.Thresholds.BalanceAbs }, d.Routing.Thresholds.BalanceAbs),
		"balance-rel-threshold":         sets(func(c cluster.Config) any { return c.Routing.Thresholds.BalanceRel }, d.Routing.Thresholds.BalanceRel),
		"hot-prefix-load":               sets(func(c cluster.Config) any { return c.Routing.Thresholds.HotLoad }, d.Routing.Thresholds.HotLoad),
		"hot-prefix-owners":             sets(func(c cluster.Config) any { return c.Routing.Thresholds.HotOwners }, d.Routing.Thresholds.HotOwners),
		"eviction-interval":             sets(func(c cluster.Config) any { return c.Routing.EvictionInterval }, d.Routing.EvictionInterval),
		"max-tree-size":                 sets(func(c cluster.Config) any { return c.Routing.MaxTreeSize }, d.Routing.MaxTreeSize),
		"prefix-ttl":                    sets(func(c cluster.Config) any { return c.Routing.PrefixTTL }, d.Routing.PrefixTTL),
		"block-size":                    sets(func(c cluster.Config) any { return [2]int{c.Routing.BlockSize, c.Proxy.BlockSize} }, [2]int{d.Routing.BlockSize, d.Proxy.BlockSize}),
		"vllm-pd-disaggregation":        sets(func(c cluster.Config) any { return c.Routing.PD }, d.Routing.PD),
		"pd-disaggregation":             sets(func(c cluster.Config) any { return c.Routing.PD }, d.Routing.PD),
		"prefill":                       seeds,
		"decode":                        seeds,
		"prefill-policy":                sets(func(c cluster.Config) any { return c.Routing.PrefillPolicy }, d.Routing.PrefillPolicy),
		"decode-policy":                 sets(func(c cluster.Config) any { return c.Routing.DecodePolicy }, d.Routing.DecodePolicy),
		"prefill-cache-threshold":       sets(func(c cluster.Config) any { return c.Routing.PrefillThresholds.CacheThreshold }, d.Routing.Thresholds.CacheThreshold),
		"prefill-balance-abs-threshold": sets(func(c cluster.Config) any { return c.Routing.PrefillThresholds.BalanceAbs }, d.Routing.Thresholds.BalanceAbs),
		"prefill-balance-rel-threshold": sets(func(c cluster.Config) any { return c.Routing.PrefillThresholds.BalanceRel }, d.Routing.Thresholds.BalanceRel),
		"decode-balance-abs-threshold":  sets(func(c cluster.Config) any { return c.Routing.DecodeThresholds.BalanceAbs }, d.Routing.Thresholds.BalanceAbs),
		"decode-balance-rel-threshold":  sets(func(c cluster.Config) any { return c.Routing.DecodeThresholds.BalanceRel }, d.Routing.Thresholds.BalanceRel),
		"max-payload-size":              sets(func(c cluster.Config) any { return c.Proxy.MaxPayloadSize }, d.Proxy.MaxPayloadSize),
		"max-response-size":             sets(func(c cluster.Config) any { return c.Proxy.MaxResponseSize }, d.Proxy.MaxResponseSize),
		"request-timeout-secs":          sets(func(c cluster.Config) any { return c.Proxy.RequestTimeout }, d.Proxy.RequestTimeout),
		"max-concurrent-requests":       sets(func(c cluster.Config) any { return c.Proxy.Admission.Capacity }, d.Proxy.Admission.Capacity),
		"rate-limit-tokens-per-second":  sets(func(c cluster.Config) any { return c.Proxy.Admission.RefillPerSec }, d.Proxy.Admission.RefillPerSec),
		"queue-size":                    sets(func(c cluster.Config) any { return c.Proxy.Admission.QueueSize }, d.Proxy.Admission.QueueSize),
		"queue-timeout-secs":            sets(func(c cluster.Config) any { return c.Proxy.Admission.QueueTimeout }, d.Proxy.Admission.QueueTimeout),
		"cors-allowed-origins":          sets(func(c cluster.Config) any { return c.Proxy.CORSOrigins }, d.Proxy.CORSOrigins),
		"retry-max-retries":             sets(func(c cluster.Config) any { return c.Proxy.Retry.MaxAttempts }, d.Proxy.Retry.MaxAttempts),
		"retry-initial-backoff-ms":      sets(func(c cluster.Config) any { return c.Proxy.Retry.InitialBackoff }, d.Proxy.Retry.InitialBackoff),
		"retry-max-backoff-ms":          sets(func(c cluster.Config) any { return c.Proxy.Retry.MaxBackoff }, d.Proxy.Retry.MaxBackoff),
		"retry-backoff-multiplier":      sets(func(c cluster.Config) any { return c.Proxy.Retry.Multiplier }, d.Proxy.Retry.Multiplier),
		"retry-jitter-factor":           sets(func(c cluster.Config) any { return c.Proxy.Retry.Jitter }, d.Proxy.Retry.Jitter),
		"disable-retries":               sets(func(c cluster.Config) any { return c.Proxy.Retry.MaxAttempts }, d.Proxy.Retry.MaxAttempts),
		"migration-limit":               sets(func(c cluster.Config) any { return c.Proxy.Migration.Limit }, d.Proxy.Migration.Limit),
		"migration-buffer-bytes":        sets(func(c cluster.Config) any { return c.Proxy.Migration.BufferBytes }, d.Proxy.Migration.BufferBytes),
		"migration-buffer-total-bytes":  sets(func(c cluster.Config) any { return c.Proxy.Migration.TotalBytes }, d.Proxy.Migration.TotalBytes),
		"disable-circuit-breaker":       sets(func(c cluster.Config) any { return c.Health.DisableCircuitBreaker }, d.Health.DisableCircuitBreaker),
		"cb-failure-threshold":          sets(func(c cluster.Config) any { return c.Health.CBFailureThreshold }, d.Health.CBFailureThreshold),
		"cb-success-threshold":          sets(func(c cluster.Config) any { return c.Health.CBSuccessThreshold }, d.Health.CBSuccessThreshold),
		"cb-timeout-duration-secs":      sets(func(c cluster.Config) any { return c.Health.CBTimeout }, d.Health.CBTimeout),
		"health-check-interval-secs":    sets(func(c cluster.Config) any { return c.Health.Interval }, d.Health.Interval),
		"health-check-timeout-secs":     sets(func(c cluster.Config) any { return c.Health.Timeout }, d.Health.Timeout),
		"health-failure-threshold":      sets(func(c cluster.Config) any { return c.Health.FailureThreshold }, d.Health.FailureThreshold),
		"health-success-threshold":      sets(func(c cluster.Config) any { return c.Health.SuccessThreshold }, d.Health.SuccessThreshold),
		"health-check-endpoint":         sets(func(c cluster.Config) any { return c.Health.Endpoint }, d.Health.Endpoint),
		"wedge-timeout":                 sets(func(c cluster.Config) any { return c.Health.WedgeTimeout }, d.Health.WedgeTimeout),
		"degrade-window":                sets(func(c cluster.Config) any { return c.Health.DegradeWindow }, d.Health.DegradeWindow),
		"degrade-ratio":                 sets(func(c cluster.Config) any { return c.Health.DegradeRatio }, d.Health.DegradeRatio),
		"prometheus-host":               sets(func(c cluster.Config) any { return c.MetricsAddr }, d.MetricsAddr),
		"prometheus-port":               sets(func(c cluster.Config) any { return c.MetricsAddr }, d.MetricsAddr),
		"debug-addr":                    sets(func(c cluster.Config) any { return c.DebugAddr }, d.DebugAddr),
		"request-id-headers":            sets(func(c cluster.Config) any { return c.Proxy.RequestIDHeaders }, d.Proxy.RequestIDHeaders),
		"api-key":                       apiKey,
		"api-key-file":                  apiKey,
		"api-keys":                      sets(func(c cluster.Config) any { return c.Proxy.APIKeys }, d.Proxy.APIKeys),
		"tls-cert-path":                 sets(func(c cluster.Config) any { return c.Proxy.TLSCertPath }, d.Proxy.TLSCertPath),
		"tls-key-path":                  sets(func(c cluster.Config) any { return c.Proxy.TLSKeyPath }, d.Proxy.TLSKeyPath),
		"allowed-worker-hosts":          sets(func(c cluster.Config) any { return c.Proxy.WorkerHosts }, d.Proxy.WorkerHosts),
		"header-read-timeout-secs":      sets(func(c cluster.Config) any { return c.Proxy.Edge.HeaderReadTimeout }, d.Proxy.Edge.HeaderReadTimeout),
		"body-read-timeout-secs":        sets(func(c cluster.Config) any { return c.Proxy.Edge.BodyReadTimeout }, d.Proxy.Edge.BodyReadTimeout),
		"write-timeout-secs":            sets(func(c cluster.Config) any { return c.Proxy.Edge.WriteTimeout }, d.Proxy.Edge.WriteTimeout),
		"idle-timeout-secs":             sets(func(c cluster.Config) any { return c.Proxy.Edge.IdleTimeout }, d.Proxy.Edge.IdleTimeout),
		"max-connections":               sets(func(c cluster.Config) any { return c.Proxy.Edge.MaxConnections }, d.Proxy.Edge.MaxConnections),
		"max-header-size":               sets(func(c cluster.Config) any { return c.Proxy.Edge.MaxHeaderSize }, d.Proxy.Edge.MaxHeaderSize),
		"max-buffered-body-bytes":       sets(func(c cluster.Config) any { return c.Proxy.Edge.MaxBufferedBodyBytes }, d.Proxy.Edge.MaxBufferedBodyBytes),
		"max-body-share":                sets(func(c cluster.Config) any { return c.Proxy.Edge.MaxBodyShare }, d.Proxy.Edge.MaxBodyShare),
		"min-body-rate":                 sets(func(c cluster.Config) any { return c.Proxy.Edge.MinBodyRate }, d.Proxy.Edge.MinBodyRate),
		"body-rate-grace-secs":          sets(func(c cluster.Config) any { return c.Proxy.Edge.BodyRateGrace }, d.Proxy.Edge.BodyRateGrace),
		"log-level":                     declares("info"),
		"log-dir":                       declares(""),
		"log-json":                      declares(false),
		"node-name":                     sets(func(c cluster.Config) any { return c.NodeName }, host),
		"data-dir":                      sets(func(c cluster.Config) any { return c.DataDir }, filepath.Join(cache, "kvrouter", host)),
		"gossip-bind":                   sets(func(c cluster.Config) any { return c.GossipBind }, d.GossipBind),
		"gossip-advertise":              sets(func(c cluster.Config) any { return c.GossipAdvertise }, d.GossipBind),
		"raft-bind":                     sets(func(c cluster.Config) any { return c.RaftBind }, d.RaftBind),
		"raft-advertise":                sets(func(c cluster.Config) any { return c.RaftAdvertise }, d.RaftBind),
		"join":                          sets(func(c cluster.Config) any { return c.Join }, d.Join),
		"bootstrap-expect":              sets(func(c cluster.Config) any { return c.BootstrapExpect }, d.BootstrapExpect),
		"gossip-key":                    sets(func(c cluster.Config) any { return c.GossipKey }, d.GossipKey),
		"admin-token":                   adminToken,
		"admin-token-file":              adminToken,
		"cluster-tls-cert":              sets(func(c cluster.Config) any { return c.ClusterTLS.CertFile }, d.ClusterTLS.CertFile),
		"cluster-tls-key":               sets(func(c cluster.Config) any { return c.ClusterTLS.KeyFile }, d.ClusterTLS.KeyFile),
		"cluster-tls-ca":                sets(func(c cluster.Config) any { return c.ClusterTLS.CAFile }, d.ClusterTLS.CAFile),
		"insecure-cluster":              sets(func(c cluster.Config) any { return c.InsecureCluster }, d.InsecureCluster),
		"enable-trace":                  declares(false),
		"otlp-traces-endpoint":          declares(""),
		"otel-sampling-ratio":           declares(1.0),
		"otel-excluded-paths":           declares([]string(nil)),
		"version":                       declares(false),
		"raft-heartbeat-timeout":        sets(func(c cluster.Config) any { return c.RaftTimings.Heartbeat }, d.RaftTimings.Heartbeat),
		"raft-election-timeout":         sets(func(c cluster.Config) any { return c.RaftTimings.Election }, d.RaftTimings.Election),
		"raft-leader-lease-timeout":     sets(func(c cluster.Config) any { return c.RaftTimings.LeaderLease }, d.RaftTimings.LeaderLease),
		"raft-commit-timeout":           sets(func(c cluster.Config) any { return c.RaftTimings.Commit }, d.RaftTimings.Commit),
		"reap-timeout":                  sets(func(c cluster.Config) any { return c.ReapTimeout }, d.ReapTimeout),
		"placer":                        sets(func(c cluster.Config) any { return c.Placer }, d.Placer),
		"gossip-flush-interval":         sets(func(c cluster.Config) any { return c.GossipFlushInterval }, d.GossipFlushInterval),
		"join-timeout":                  sets(func(c cluster.Config) any { return c.JoinTimeout }, d.JoinTimeout),
		"worker-connect-timeout":        sets(func(c cluster.Config) any { return c.Proxy.DialTimeout }, d.Proxy.DialTimeout),
		"worker-idle-timeout":           sets(func(c cluster.Config) any { return c.Proxy.WorkerIdleTimeout }, d.Proxy.WorkerIdleTimeout),

		"service-discovery":           declares(false),
		"selector":                    declares([]string(nil)),
		"prefill-selector":            declares([]string(nil)),
		"decode-selector":             declares([]string(nil)),
		"service-discovery-port":      declares(discovery.DefaultPort),
		"service-discovery-namespace": declares(""),

		"priority-classes":            sets(func(c cluster.Config) any { return c.Proxy.Admission.Classes }, d.Proxy.Admission.Classes),
		"priority-default-class":      sets(func(c cluster.Config) any { return c.Proxy.Admission.DefaultClass }, d.Proxy.Admission.DefaultClass),
		"priority-reserved":           sets(func(c cluster.Config) any { return c.Proxy.Admission.Reserved }, d.Proxy.Admission.Reserved),
		"api-key-classes":             sets(func(c cluster.Config) any { return c.Proxy.Admission.KeyClasses }, d.Proxy.Admission.KeyClasses),
		"api-key-tenants":             sets(func(c cluster.Config) any { return c.Proxy.Admission.KeyTenants }, d.Proxy.Admission.KeyTenants),
		"engine-priority":             sets(func(c cluster.Config) any { return c.Proxy.Admission.EnginePriority }, d.Proxy.Admission.EnginePriority),
		"lend-reserved-slots":         sets(func(c cluster.Config) any { return c.Proxy.Admission.LendReserved }, d.Proxy.Admission.LendReserved),
		"preempt-by-resume":           sets(func(c cluster.Config) any { return c.Proxy.Admission.PreemptByResume }, d.Proxy.Admission.PreemptByResume),
		"tenant-header":               sets(func(c cluster.Config) any { return c.Proxy.Admission.TenantHeader }, d.Proxy.Admission.TenantHeader),
		"tenant-max-inflight":         sets(func(c cluster.Config) any { return c.Proxy.Admission.TenantMaxInFlight }, d.Proxy.Admission.TenantMaxInFlight),
		"disable-tier-fairness":       sets(func(c cluster.Config) any { return c.Proxy.Admission.TierFair }, d.Proxy.Admission.TierFair),
		"saturation-kv-usage":         sets(func(c cluster.Config) any { return c.Proxy.Admission.KVFull }, d.Proxy.Admission.KVFull),
		"engine-scrape-interval-secs": sets(func(c cluster.Config) any { return c.Health.EngineScrapeInterval }, d.Health.EngineScrapeInterval),

		"kv-events":                  sets(func(c cluster.Config) any { return [2]bool{c.KVEvents.Enabled, c.Proxy.Tokenize.Enabled} }, [2]bool{d.KVEvents.Enabled, d.Proxy.Tokenize.Enabled}),
		"kv-events-endpoints":        seeds,
		"kv-events-block-size":       sets(func(c cluster.Config) any { return c.KVEvents.BlockSize }, d.KVEvents.BlockSize),
		"kv-events-max-blocks":       sets(func(c cluster.Config) any { return c.KVEvents.MaxBlocks }, d.KVEvents.MaxBlocks),
		"kv-events-replay-offset":    sets(func(c cluster.Config) any { return c.KVEvents.ReplayOffset }, d.KVEvents.ReplayOffset),
		"kv-events-stale-after":      sets(func(c cluster.Config) any { return c.KVEvents.StaleAfter }, d.KVEvents.StaleAfter),
		"kv-events-reservation":      sets(func(c cluster.Config) any { return c.KVEvents.Reservation }, d.KVEvents.Reservation),
		"kv-events-tokenize-timeout": sets(func(c cluster.Config) any { return c.Proxy.Tokenize.Timeout }, d.Proxy.Tokenize.Timeout),
		"kv-events-bind":             sets(func(c cluster.Config) any { return c.KVEvents.Bind }, d.KVEvents.Bind),
		"kv-events-tokenize-cache-bytes": sets(func(c cluster.Config) any { return c.Proxy.Tokenize.CacheBytes },
			d.Proxy.Tokenize.CacheBytes),
		"kv-events-max-message-bytes": sets(func(c cluster.Config) any { return c.KVEvents.MaxMessageBytes }, d.KVEvents.MaxMessageBytes),
		"kv-events-keep-tokens-alone": sets(func(c cluster.Config) any { return c.Proxy.Tokenize.Alone }, d.Proxy.Tokenize.Alone),

		"lora-residency": sets(func(c cluster.Config) any { return c.LoRA.Residency }, d.LoRA.Residency),
		"lora-load-path": sets(func(c cluster.Config) any { return c.LoRA.LoadPath }, d.LoRA.LoadPath),
	}
}

// appServeFlags are the flags of the app's own `router serve`, wherever
// they are declared.
func appServeFlags(t *testing.T) []cli.Flag {
	t.Helper()
	for _, c := range newApp().Commands {
		if c.Name == "serve" {
			return c.Flags
		}
	}
	t.Fatal("the app has no serve command")
	return nil
}

// isCompat reports whether name is a vllm-router flag without a
// counterpart here: its default is vllm-router's, which
// TestEveryVLLMRouterFlagIsAcceptedWithItsDefault checks.
func isCompat(name string) bool {
	return slices.ContainsFunc(compatibleFlags, func(f compatFlag) bool { return f.flag.Names()[0] == name })
}

// declaredDefault is the default a flag declares, as the type it reads.
func declaredDefault(f cli.Flag) any {
	switch f := f.(type) {
	case *cli.StringFlag:
		return f.Value
	case *cli.IntFlag:
		return f.Value
	case *cli.Int64Flag:
		return f.Value
	case *cli.Float64Flag:
		return f.Value
	case *cli.BoolFlag:
		return f.Value
	case *cli.DurationFlag:
		return f.Value
	case *cli.StringSliceFlag:
		if f.Value == nil {
			return []string(nil)
		}
		return f.Value.Value()
	}
	return f
}

// sameDefault is reflect.DeepEqual, but for empty slices and maps, which
// are all alike: unset.
func sameDefault(a, b any) bool {
	empty := func(v any) bool {
		r := reflect.ValueOf(v)
		return r.IsValid() && (r.Kind() == reflect.Slice || r.Kind() == reflect.Map) && r.Len() == 0
	}
	if empty(a) && empty(b) {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func TestEveryFlagDefaultsToItsConfigFieldsDefault(t *testing.T) {
	flags, golden := appServeFlags(t), goldenFlags(t)
	parsed := parseDefaults(t)
	seen := map[string]bool{}
	for _, f := range flags {
		name := f.Names()[0]
		if name == "help" {
			continue
		}
		seen[name] = true
		row, ok := golden[name]
		switch {
		case isCompat(name):
			if ok {
				t.Errorf("--%s is a vllm-router flag without a counterpart here; it needs no golden row", name)
			}
		case !ok:
			t.Errorf("--%s has no golden row: add to goldenFlags the config field it sets and its package's default", name)
		case row.field == nil:
			if got := declaredDefault(f); !sameDefault(got, row.want) {
				t.Errorf("--%s: declared default %v, want %v", name, got, row.want)
			}
		default:
			if got := row.field(parsed); !sameDefault(got, row.want) {
				t.Errorf("--%s: without the flag its config field is %v, want its package's default %v", name, got, row.want)
			}
		}
	}
	for name := range golden {
		if !seen[name] {
			t.Errorf("golden row for --%s, which `router serve` does not have", name)
		}
	}
}

// parseDefaults is the config `router serve` gives without a flag, the
// environment's ROUTER_* variables unset.
func parseDefaults(t *testing.T) cluster.Config {
	t.Helper()
	for _, f := range appServeFlags(t) {
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, name := range ev.GetEnvVars() {
				if _, set := os.LookupEnv(name); set {
					t.Setenv(name, "")
					os.Unsetenv(name)
				}
			}
		}
	}
	var cfg cluster.Config
	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) (err error) {
		cfg, err = configFrom(c)
		return err
	}
	app := &cli.App{Name: "router", Commands: []*cli.Command{cmd}}
	if err := app.Run([]string{"router", "serve"}); err != nil {
		t.Fatalf("router serve without flags: %v", err)
	}
	return cfg
}

// A value the flag parser itself refuses (a duration without its unit, a
// word for a number), on the command line or in ROUTER_*, is refused
// naming the flag as --name, as the refusals after parsing are.
func TestAValueTheParserRefusesNamesItsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		flag string
	}{
		{args: []string{"--wedge-timeout", "60"}, flag: "--wedge-timeout"},
		{args: []string{"--queue-timeout-secs", "1m"}, flag: "--queue-timeout-secs"},
		{env: "ROUTER_REAP_TIMEOUT", flag: "--reap-timeout"},
	} {
		if tc.env != "" {
			t.Setenv(tc.env, "soon")
		}
		_, err := parseServe(t, tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag+": ") {
			t.Errorf("%v %s: %v, want a refusal that starts with %s", tc.args, tc.env, err, tc.flag)
		}
		if tc.env != "" {
			os.Unsetenv(tc.env)
		}
	}
}
