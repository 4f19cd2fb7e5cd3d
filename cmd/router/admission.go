package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/proxy"
)

// admissionFlags are the flags of priority classes, tenants and the
// saturation signal (vllm-router's bounds are among serveFlags).
func admissionFlags() []cli.Flag {
	d := cluster.DefaultConfig()
	a := d.Proxy.Admission
	return []cli.Flag{
		stringFlag("priority-classes", strings.Join(a.Classes, ","),
			"admission classes, highest first; empty: one class, and priority headers are ignored"),
		stringFlag("priority-default-class", a.DefaultClass, "class of a request that names none"),
		stringFlag("priority-reserved", "", "in-flight slots that lower classes may not take, as class=slots,class=slots"),
		boolFlag("engine-priority", "the engines run vLLM's --scheduling-policy priority: pass each request's class rank on as its priority field"),
		boolFlag("lend-reserved-slots", "let lower classes borrow unused --priority-reserved slots, the class taking them back over the engines' bound; for engines that preempt a running request for a higher-priority waiting one (vLLM v1 does not: there the class waits at the engine for a borrower to end)"),
		boolFlag("preempt-by-resume", "a class taking back a --lend-reserved-slots slot takes it at once: a borrower's stream on its worker gives way at its next chunk (ended at the engine), waits first in the queue, and resumes where it stopped, its client seeing a pause; needs --lend-reserved-slots and --migration-limit above 0"),
		sliceFlag("api-key-classes", "class of an API key's requests, as KEY=class (repeatable): the class of those that name none, and the highest any of them gets (a key without one is held to --priority-default-class); needs --api-keys"),
		sliceFlag("api-key-tenants", "tenants an API key speaks for, as KEY=tenant (repeatable; several keys may share a tenant): its first is its requests' tenant, and --tenant-header may name any of them; needs --api-keys"),
		stringFlag("tenant-header", a.TenantHeader, "header naming a request's tenant: as sent without --api-keys; with them, one of the tenants --api-key-tenants gives the key (403 otherwise); default: the key's tenant"),
		intFlag("tenant-max-inflight", a.TenantMaxInFlight, "ceiling of one tenant's requests in flight across the tier; 0: none"),
		boolFlag("disable-tier-fairness", "share the engines between tenants by this replica's own requests only, ignoring the peers' queue reports"),
		floatFlag("saturation-kv-usage", a.KVFull, "KV cache usage (0..1) at which an engine counts as full"),
		secondsFlag("engine-scrape-interval-secs", d.Health.EngineScrapeInterval, "seconds between reads of a busy worker's /metrics for the saturation signal; 0: only the progress detector's reads"),
	}
}

// admissionFrom fills the admission settings of p from the flags.
func admissionFrom(c *cli.Context, p *proxy.Config) error {
	a := &p.Admission
	a.Classes = nil
	for _, name := range strings.Split(c.String("priority-classes"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			a.Classes = append(a.Classes, name)
		}
	}
	a.DefaultClass = c.String("priority-default-class")
	if len(a.Classes) == 0 && !c.IsSet("priority-default-class") {
		a.DefaultClass = ""
	}
	var err error
	if a.Reserved, err = admission.ParseReserved(c.String("priority-reserved")); err != nil {
		return err
	}
	a.KeyClasses = map[string]string{}
	for _, kv := range c.StringSlice("api-key-classes") {
		key, class, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return fmt.Errorf("--api-key-classes: want KEY=class")
		}
		a.KeyClasses[key] = class
	}
	a.KeyTenants = map[string][]string{}
	for _, kv := range c.StringSlice("api-key-tenants") {
		key, tenant, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return fmt.Errorf("--api-key-tenants: want KEY=tenant")
		}
		a.KeyTenants[key] = append(a.KeyTenants[key], tenant)
	}
	a.TenantHeader = c.String("tenant-header")
	a.TenantMaxInFlight = c.Int("tenant-max-inflight")
	a.TierFair = !c.Bool("disable-tier-fairness")
	a.EnginePriority = c.Bool("engine-priority")
	a.LendReserved = c.Bool("lend-reserved-slots")
	a.PreemptByResume = c.Bool("preempt-by-resume")
	a.KVFull = c.Float64("saturation-kv-usage")
	if err := a.Validate(); err != nil {
		return err
	}
	if a.PreemptByResume && p.Migration.Limit <= 0 {
		return fmt.Errorf("--preempt-by-resume: needs --migration-limit above 0 (a stream that gives way resumes as a migrated one does)")
	}
	return a.ValidateKeyed(p.APIKeys)
}
