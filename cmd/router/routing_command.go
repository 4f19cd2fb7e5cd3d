package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// routingCommand is `router cluster routing`: print the tier's routing
// config, or change some of its fields for every replica at once. A change
// reads the config, edits it and writes it back naming the index it read
// (compare-and-set): when another change came in between, the write is
// refused (409) and nothing changes; run it again.
func routingCommand() *cli.Command {
	flags := append(adminFlags(),
		&cli.StringFlag{Name: "policy", Usage: "routing policy of regular workers"},
		&cli.StringFlag{Name: "miss-placement", Usage: "least_load or rendezvous"},
		&cli.Float64Flag{Name: "cache-threshold", Usage: "share of the routing text that must be cached for a hit"},
		&cli.Float64Flag{Name: "balance-abs-threshold", Usage: "in-flight requests above the least loaded before a worker can be overloaded"},
		&cli.Float64Flag{Name: "balance-rel-threshold", Usage: "factor over the least loaded before a worker can be overloaded"},
		&cli.Float64Flag{Name: "hot-prefix-load", Usage: "load above the least loaded, and hits in the last second, before a prefix spreads to another owner; 0 = never"},
		&cli.IntFlag{Name: "hot-prefix-owners", Usage: "most workers a hot prefix spreads over"},
	)
	return &cli.Command{
		Name:   "routing",
		Usage:  "show the tier's routing config, or change it for every replica (--policy, --miss-placement, thresholds)",
		Flags:  flags,
		Action: routing,
	}
}

func routing(c *cli.Context) error {
	client := newAdminClient(c, adminRequestTimeout)
	var v adminapi.RoutingView
	raw, err := client.getJSON("/cluster/routing", &v)
	if err != nil {
		return err
	}
	if changed := editRouting(c, &v.Config); changed {
		raw, _, err = client.call(http.MethodPut, "/cluster/routing", v)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("unexpected reply: %w", err)
		}
	}
	if c.Bool("json") {
		return printRaw(c, raw)
	}
	return printRouting(c, v)
}

// editRouting applies the flags that were given to cfg and says whether
// any was.
func editRouting(c *cli.Context, cfg *store.RoutingConfig) bool {
	changed := false
	if c.IsSet("policy") {
		cfg.Policy, changed = c.String("policy"), true
	}
	if c.IsSet("miss-placement") {
		cfg.MissPlacement, changed = c.String("miss-placement"), true
	}
	if c.IsSet("hot-prefix-owners") {
		cfg.HotPrefixOwners, changed = c.Int("hot-prefix-owners"), true
	}
	for flag, dst := range map[string]*float64{"cache-threshold": &cfg.CacheThreshold,
		"balance-abs-threshold": &cfg.BalanceAbsThreshold, "balance-rel-threshold": &cfg.BalanceRelThreshold,
		"hot-prefix-load": &cfg.HotPrefixLoad} {
		if c.IsSet(flag) {
			*dst, changed = c.Float64(flag), true
		}
	}
	return changed
}

func printRouting(c *cli.Context, v adminapi.RoutingView) error {
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	cfg := v.Config
	fmt.Fprintf(tw, "index\t%d (%s)\n", v.Index, v.Source)
	fmt.Fprintf(tw, "block size\t%d\n", cfg.BlockSize)
	fmt.Fprintf(tw, "policy\t%s\n", cfg.Policy)
	fmt.Fprintf(tw, "miss placement\t%s\n", cfg.MissPlacement)
	fmt.Fprintf(tw, "cache threshold\t%v\n", cfg.CacheThreshold)
	fmt.Fprintf(tw, "balance thresholds\tabs %v, rel %v\n", cfg.BalanceAbsThreshold, cfg.BalanceRelThreshold)
	fmt.Fprintf(tw, "hot prefixes\tload %v, owners %d\n", cfg.HotPrefixLoad, cfg.HotPrefixOwners)
	for _, role := range []struct {
		name string
		r    *store.RoleRouting
	}{{"prefill", cfg.Prefill}, {"decode", cfg.Decode}} {
		if r := role.r; r != nil {
			fmt.Fprintf(tw, "%s\t%s, %s, cache %v, abs %v, rel %v\n", role.name, r.Policy, r.MissPlacement,
				r.CacheThreshold, r.BalanceAbsThreshold, r.BalanceRelThreshold)
		}
	}
	return tw.Flush()
}
