package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/cluster/discovery"
	"github.com/kvrouter/kvrouter/store"
)

// Worker discovery from Kubernetes, under vllm-router's flag names:
// --service-discovery turns it on, --selector (or, with disaggregation,
// --prefill-selector and --decode-selector) picks the pods,
// --service-discovery-port is their port and --service-discovery-namespace
// their namespace (default: this pod's own).

// discoveryFlags are the flags, for serveFlags.
func discoveryFlags() []cli.Flag {
	return []cli.Flag{
		boolFlag("service-discovery", "register the ready pods that match --selector as workers (Kubernetes), through the Raft leader"),
		sliceFlag("selector", "label selector of worker pods (key=value, repeatable; any Kubernetes selector)"),
		sliceFlag("prefill-selector", "with disaggregation: label selector of prefill pods"),
		sliceFlag("decode-selector", "with disaggregation: label selector of decode pods"),
		intFlag("service-discovery-port", discovery.DefaultPort, "port of discovered workers on their pod IP"),
		stringFlag("service-discovery-namespace", "", "namespace whose pods are watched (default: this pod's namespace)"),
	}
}

// discoverySettings are the discovery flags, checked.
type discoverySettings struct {
	namespace string
	selectors []discovery.RoleSelector
	port      int
}

// serviceAccountNamespace is where Kubernetes tells a pod its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// discoveryFrom reads the discovery flags, refusing bad ones by name; nil
// when --service-discovery is off.
func discoveryFrom(c *cli.Context, log *slog.Logger) (*discoverySettings, error) {
	if !c.Bool("service-discovery") {
		for _, f := range []string{"selector", "prefill-selector", "decode-selector", "service-discovery-namespace"} {
			if c.IsSet(f) {
				log.Warn("a discovery flag without --service-discovery does nothing", "flag", "--"+f)
			}
		}
		return nil, nil
	}
	s := &discoverySettings{port: c.Int("service-discovery-port"), namespace: c.String("service-discovery-namespace")}
	if s.port < 1 || s.port > 65535 {
		return nil, fmt.Errorf("--service-discovery-port: %d is not a port", s.port)
	}
	var err error
	if s.selectors, err = selectorsFrom(c); err != nil {
		return nil, err
	}
	if s.namespace == "" {
		s.namespace = "default"
		if own, err := os.ReadFile(serviceAccountNamespace); err == nil && len(strings.TrimSpace(string(own))) > 0 {
			s.namespace = strings.TrimSpace(string(own))
		}
	}
	return s, nil
}

// selectorsFrom reads the selector of each role: --selector for regular
// workers, or with disaggregation --prefill-selector and --decode-selector.
func selectorsFrom(c *cli.Context) ([]discovery.RoleSelector, error) {
	pd := c.Bool("vllm-pd-disaggregation") || c.Bool("pd-disaggregation")
	roles := []struct {
		flag string
		role store.Role
	}{{"selector", store.RoleRegular}}
	if pd {
		roles = []struct {
			flag string
			role store.Role
		}{{"prefill-selector", store.RolePrefill}, {"decode-selector", store.RoleDecode}}
	}
	for _, f := range []string{"prefill-selector", "decode-selector"} {
		if !pd && c.IsSet(f) {
			return nil, fmt.Errorf("--%s: prefill and decode pods need --vllm-pd-disaggregation or --pd-disaggregation", f)
		}
	}
	var out []discovery.RoleSelector
	for _, r := range roles {
		values := c.StringSlice(r.flag)
		if len(values) == 0 {
			return nil, fmt.Errorf("--%s: --service-discovery needs a label selector of the %s pods (such as app=vllm)", r.flag, r.role)
		}
		sel, err := labels.Parse(strings.Join(values, ","))
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", r.flag, err)
		}
		out = append(out, discovery.RoleSelector{Role: r.role, Selector: sel})
	}
	return out, nil
}

// inClusterPods connects to the API server of the pod this runs in.
func inClusterPods() (discovery.PodSource, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--service-discovery: not running in a Kubernetes pod (or without its service account): %w", err)
	}
	pods, err := discovery.NewAPIServerSource(cfg)
	if err != nil {
		return nil, fmt.Errorf("--service-discovery: %w", err)
	}
	return pods, nil
}

// replicaRegistry is a replica's registry as discovery writes it.
type replicaRegistry struct{ r *cluster.Replica }

func (rr replicaRegistry) Workers() []store.Worker { return rr.r.RegistryWorkers() }
func (rr replicaRegistry) IsLeader() bool          { return rr.r.IsLeader() }
func (rr replicaRegistry) Apply(ctx context.Context, cmd store.Command) (store.Result, error) {
	return rr.r.ApplyRegistry(ctx, cmd)
}

// runDiscovery watches the pods for r until ctx ends; wait returns once
// the watch has stopped.
func runDiscovery(ctx context.Context, s *discoverySettings, pods discovery.PodSource, r *cluster.Replica,
	allow func(string) error, log *slog.Logger) (wait func(), err error) {
	w, err := discovery.New(discovery.Config{Pods: pods, Namespace: s.namespace, Selectors: s.selectors, Port: s.port,
		AllowWorker: allow, Logger: log}, replicaRegistry{r})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			log.Error("worker discovery stopped", "err", err)
		}
	})
	return wg.Wait, nil
}
