package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/proxy"
	"github.com/kvrouter/kvrouter/store"
)

// kvEventsFlags are the flags of routing on the engines' KV events
// (--kv-events), off by default: the text index needs nothing of the engine.
func kvEventsFlags() []cli.Flag {
	k, tk := cluster.DefaultKVEvents(), proxy.DefaultConfig().Tokenize
	return []cli.Flag{
		boolFlag("kv-events", "route on the engines' own KV-cache events (vLLM's --kv-events-config) and the prompts' token IDs from their /tokenize, instead of the text index alone"),
		sliceFlag("kv-events-endpoints", "each --worker-urls worker's KV-event endpoint, tcp://host:port, in the same order (an empty entry: the worker's host, port 5557)"),
		intFlag("kv-events-block-size", k.BlockSize, "the engines' KV block size in tokens (vLLM's --block-size)"),
		intFlag("kv-events-max-blocks", k.MaxBlocks, "most blocks kept per worker (its engine's num_gpu_blocks is enough)"),
		intFlag("kv-events-replay-offset", k.ReplayOffset, "replay socket port minus the event socket port (vLLM's replay_endpoint); -1: the engines have none"),
		durationFlag("kv-events-stale-after", k.StaleAfter, "an engine given work that publishes nothing for this long, or whose set was emptied this recently, routes on the text index"),
		durationFlag("kv-events-reservation", k.Reservation, "how long a decision's blocks count as its worker's before the engine's events show them"),
		durationFlag("kv-events-tokenize-timeout", tk.Timeout, "bound on the latency tokenization adds; past it the request routes on the text index"),
		stringFlag("kv-events-bind", "", "also bind a SUB socket here, tcp://host:port, that engines dial (vLLM's --kv-events-config endpoint set to the tier's address); what each replica hears there it relays to its peers, and a worker is then dialed only where its KV-event endpoint is given"),
		intFlag("kv-events-tokenize-cache-bytes", tk.CacheBytes, "most bytes the prompts' cached token IDs may take (4 a token), the least recently used out"),
		intFlag("kv-events-max-message-bytes", k.MaxMessageBytes, "most bytes one message of an engine's event or replay socket may hold; a peer that sends more is cut off"),
		boolFlag("kv-events-keep-tokens-alone", "keep the prompts' token IDs each replica learns to itself rather than with the tier's keepers, so that a conversation's turn through another replica waits for an engine's /tokenize (for comparisons)"),
	}
}

// kvEventsFrom reads the --kv-events flags into cfg and gives each seed of
// --worker-urls its --kv-events-endpoints entry, refusing a malformed one
// naming the flag. Every endpoint passes the worker-host policy when the
// hub subscribes, before any dial.
func kvEventsFrom(c *cli.Context, cfg *cluster.Config) error {
	on, eps := c.Bool("kv-events"), c.StringSlice("kv-events-endpoints")
	for _, flag := range []string{"kv-events-endpoints", "kv-events-bind", "kv-events-keep-tokens-alone"} {
		if !on && c.IsSet(flag) {
			return fmt.Errorf("--%s: needs --kv-events", flag)
		}
	}
	k := cluster.KVEvents{Enabled: on, BlockSize: c.Int("kv-events-block-size"), MaxBlocks: c.Int("kv-events-max-blocks"),
		ReplayOffset: c.Int("kv-events-replay-offset"), StaleAfter: c.Duration("kv-events-stale-after"),
		Reservation: c.Duration("kv-events-reservation"), Bind: c.String("kv-events-bind"),
		MaxMessageBytes: c.Int("kv-events-max-message-bytes")}
	tokenize := c.Duration("kv-events-tokenize-timeout")
	if n := c.Int("kv-events-tokenize-cache-bytes"); n < 1<<20 {
		return fmt.Errorf("--kv-events-tokenize-cache-bytes: must be at least 1048576")
	}
	if k.BlockSize < 1 {
		return fmt.Errorf("--kv-events-block-size: must be at least 1")
	}
	if k.MaxMessageBytes < 1<<10 {
		return fmt.Errorf("--kv-events-max-message-bytes: must be at least 1024")
	}
	if k.ReplayOffset == 0 {
		return fmt.Errorf("--kv-events-replay-offset: 0 would be the event socket itself; -1 means no replay socket")
	}
	for flag, d := range map[string]time.Duration{"kv-events-stale-after": k.StaleAfter,
		"kv-events-reservation": k.Reservation, "kv-events-tokenize-timeout": tokenize} {
		if d <= 0 {
			return fmt.Errorf("--%s: want a positive duration such as 20ms (got %v)", flag, d)
		}
	}
	if err := k.Validate(); err != nil {
		return err
	}
	cfg.KVEvents = k
	cfg.Proxy.Tokenize.Enabled, cfg.Proxy.Tokenize.Timeout = on, tokenize
	cfg.Proxy.Tokenize.CacheBytes = c.Int("kv-events-tokenize-cache-bytes")
	cfg.Proxy.Tokenize.Alone = c.Bool("kv-events-keep-tokens-alone")
	if !on {
		return nil
	}
	return alignKVEndpoints(eps, cfg)
}

// alignKVEndpoints gives the i-th --worker-urls seed the i-th endpoint.
func alignKVEndpoints(eps []string, cfg *cluster.Config) error {
	var regular []*cluster.Seed
	for i := range cfg.Seeds {
		if cfg.Seeds[i].Role == proxy.RoleRegular {
			regular = append(regular, &cfg.Seeds[i])
		}
	}
	if len(eps) > len(regular) {
		return fmt.Errorf("--kv-events-endpoints: %d endpoints for %d --worker-urls", len(eps), len(regular))
	}
	for i, raw := range eps {
		ep, err := store.NormalizeKVEventsEndpoint(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("--kv-events-endpoints: %w", err)
		}
		if ep != "" {
			if err := cfg.Proxy.WorkerHosts.Allows("http://" + ep[len("tcp://"):]); err != nil {
				return fmt.Errorf("--kv-events-endpoints: %s: %w", ep, err)
			}
		}
		regular[i].KVEventsEndpoint = ep
	}
	return nil
}
