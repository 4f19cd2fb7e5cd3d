package main

import (
	"time"

	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/loadsync"
	"github.com/kvrouter/kvrouter/sim"
	"github.com/kvrouter/kvrouter/sim/fleet"
	"github.com/kvrouter/kvrouter/sim/workload"
)

// errBadFlag marks a flag value refused at start; the message names the flag.
var errBadFlag = errors.New("invalid flag")

// badFlag reports an invalid value of flag.
func badFlag(flag, want string, got any) error {
	return fmt.Errorf("%w --%s: want %s, got %v", errBadFlag, flag, want, got)
}

// defaultWorkers is the fleet size without --workers.
const defaultWorkers = 16

// flags are fleetsim's flags: the workload, the fleet, the routing, the
// gossip and the report.
func flags() []cli.Flag {
	d := workload.DefaultAgenticConfig()
	t := affinity.DefaultThresholds()
	return []cli.Flag{
		&cli.StringFlag{Name: "trace", Usage: "Mooncake-format JSONL trace to replay (or --agentic)"},
		&cli.IntFlag{Name: "limit", Usage: "replay only the first N records of --trace (0: all)"},
		&cli.Float64Flag{Name: "rate-scale", Value: 1, Usage: "divide the trace's timestamps by this: 2 replays twice as fast"},
		&cli.DurationFlag{Name: "arrival-spread", Usage: "move each --trace record's arrival later by a uniform random offset below this, drawn from --arrival-seed: the shared conversation trace stamps its requests in 3 s steps, and 3s replays each step's requests spread over it instead of in one instant (0: as recorded)"},
		&cli.Uint64Flag{Name: "arrival-seed", Value: 1, Usage: "seed of --arrival-spread's offsets"},
		&cli.BoolFlag{Name: "agentic", Usage: "run closed-loop agentic sessions instead of a trace"},
		&cli.IntFlag{Name: "sessions", Value: d.Sessions, Usage: "agentic: concurrent sessions"},
		&cli.IntFlag{Name: "turns", Value: d.Turns, Usage: "agentic: requests per session"},
		&cli.IntFlag{Name: "system-prompt-tokens", Value: d.SystemPromptTokens, Usage: "agentic: system prompt shared by all sessions, in tokens"},
		&cli.IntFlag{Name: "task-tokens", Value: d.TaskTokens, Usage: "agentic: each session's task statement, in tokens"},
		&cli.IntFlag{Name: "observation-tokens", Value: d.ObservationTokens, Usage: "agentic: mean tool output appended per turn, in tokens"},
		&cli.IntFlag{Name: "answer-tokens", Value: d.AnswerTokens, Usage: "agentic: max_tokens per turn"},
		&cli.DurationFlag{Name: "think-time", Value: d.ThinkTime, Usage: "agentic: mean tool latency between turns"},
		&cli.IntFlag{Name: "groups", Value: 1, Usage: "agentic: split the sessions into groups, each sharing its own system prompt (RL rollouts of one task)"},
		&cli.Float64Flag{Name: "observation-spread", Usage: "agentic: make groups unequal: each group's mean observation is scaled by exp(spread * a normal draw)"},

		&cli.IntFlag{Name: "workers", Value: defaultWorkers, Usage: "workers in the fleet (without --pd)"},
		&cli.StringFlag{Name: "pd", Usage: "P:D splits the fleet into P prefill and D decode workers (vLLM's sequential protocol)"},
		&cli.IntSliceFlag{Name: "replicas", Value: cli.NewIntSlice(1), Usage: "router replica counts, one run each: 1,2,4,8"},
		&cli.StringSliceFlag{Name: "policies", Value: cli.NewStringSlice(affinity.PolicyCacheAware),
			Usage: "policies, one run each; cache_aware:rendezvous places misses by rendezvous hashing (" + strings.Join(affinity.PolicyNames, ", ") + ")"},
		&cli.StringSliceFlag{Name: "sync", Value: cli.NewStringSlice(string(fleet.SyncGossip)), Usage: "how replicas share state, one run each: gossip, none, shared"},
		&cli.StringFlag{Name: "decode-policy", Value: affinity.PolicyLeastLoad, Usage: "policy of the decode phase with --pd"},
		&cli.Float64Flag{Name: "cache-threshold", Value: t.CacheThreshold, Usage: "share of the routing text a match must exceed to count as a hit"},
		&cli.Float64Flag{Name: "balance-abs-threshold", Value: t.BalanceAbs, Usage: "in-flight requests above the least loaded before a worker can be overloaded"},
		&cli.Float64Flag{Name: "balance-rel-threshold", Value: t.BalanceRel, Usage: "factor over the least loaded before a worker can be overloaded"},
		&cli.Float64Flag{Name: "hot-prefix-load", Value: t.HotLoad, Usage: "in-flight requests above the least loaded on every owner of a prefix with as many recent hits before it spreads to another owner; 0 = never"},
		&cli.IntFlag{Name: "hot-prefix-owners", Value: t.HotOwners, Usage: "most workers a hot prefix spreads over"},
		&cli.IntFlag{Name: "block-size", Value: affinity.DefaultBlockSize, Usage: "router hash block, in bytes of routing text"},

		&cli.IntFlag{Name: "kv-capacity-tokens", Value: sim.DefaultKVCapacityTokens, Usage: "each worker's KV cache, in tokens"},
		&cli.IntFlag{Name: "max-num-seqs", Value: sim.DefaultMaxNumSeqs, Usage: "each worker's concurrent sequences"},
		&cli.StringSliceFlag{Name: "slowdown", Usage: "ID:FACTOR makes worker ID (from 1, prefill first with --pd) FACTOR times slower; repeatable"},
		&cli.StringSliceFlag{Name: "kill", Usage: "ID:AT kills worker ID at AT of virtual time (as 3:2s): its streams resume elsewhere as the router's do, its other requests are retried; repeatable, not with --pd"},
		&cli.IntFlag{Name: "migration-limit", Value: fleet.DefaultMigrationLimit, Usage: "most times one stream cut by --kill resumes on another worker, as the router's flag (0: a cut stream fails)"},

		&cli.DurationFlag{Name: "gossip-interval", Value: loadsync.DefaultLoadInterval, Usage: "how often a replica reports its load and digests while its loads do not change"},
		&cli.DurationFlag{Name: "gossip-flush-interval", Value: loadsync.DefaultLoadFlushInterval, Usage: "how soon after its last report a replica whose loads changed reports again, as a router replica does (--gossip-interval or more: only every --gossip-interval)"},
		&cli.DurationFlag{Name: "gossip-delay", Value: fleet.DefaultGossipDelay, Usage: "one-way delay of a gossip packet"},
		&cli.BoolFlag{Name: "peer-share", Value: true, Usage: "gossip: each replica counts its peers' expected share of its own last interval's reservations in the load it selects on, as a router replica does, and places misses that matched nothing by rendezvous (--peer-share=false to compare)"},
		&cli.BoolFlag{Name: "calibrate-index", Value: true, Usage: "each replica shrinks a worker's index budget when its engine's answer shows a predicted hit was not cached, and grows it back when one was, as a router replica does (--calibrate-index=false to compare)"},
		&cli.BoolFlag{Name: "gossip-calibration", Value: true, Usage: "with --sync gossip, each replica sends the judgements behind its calibration to its peers with its next load report and applies theirs, as router replicas do (--gossip-calibration=false to compare)"},
		&cli.BoolFlag{Name: "placer", Value: true, Usage: "gossip: replica 0 is the tier's placer: a replica that knows nothing of a request's prefix asks it for the worker, one --gossip-delay each way, as a router replica asks the Raft leader (its --placer, on by default); --placer=false: every replica decides alone"},
		&cli.BoolFlag{Name: "share-in-overload", Value: true, Usage: "gossip: a hit's overload check counts the peers' expected share, as a router replica does (--share-in-overload=false checks the reported loads alone; the share still orders the owners and places misses)"},
		&cli.BoolFlag{Name: "demote-superseded", Value: true, Usage: "gossip: a hit announces its conversation's previous deepest fact again with a span of 1, so peers charge the prefix once, as a router replica does (--demote-superseded=false to compare)"},
		&cli.Float64Flag{Name: "gossip-loss", Usage: "probability that a gossip packet is lost on its way to one peer, in [0, 1)"},

		&cli.Float64Flag{Name: "placer-answer-loss", Usage: "with --placer: share in [0, 1) of the placer's answers lost on their way back; the asker decides alone at its question's deadline (the router's 50 ms, 150 ms while the placer answers) and asks that placer nothing for a second"},
		&cli.BoolFlag{Name: "door", Value: true, Usage: "each replica runs the router's admission door with its defaults: a request waits at its replica while the engines, by that replica's last reading of them (every --engine-scrape-interval-secs), run all they can (--door=false: every request is routed as it arrives)"},
		&cli.Float64Flag{Name: "engine-scrape-interval-secs", Value: fleet.DefaultEngineScrapeInterval.Seconds(), Usage: "with --door: seconds between a replica's reads of each engine, as the router's flag"},
		&cli.StringFlag{Name: "balance", Value: "random", Usage: "load balancer in front of the replicas: random (each request to a random replica) or session (every turn of an agentic session to the same one)"},
		&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of every random choice (load balancer, policies, loss, agentic draws)"},
		&cli.StringFlag{Name: "json", Usage: `also write {"runs":[...]} to this file`},
		&cli.IntFlag{Name: "parallel", Value: 1, Usage: "runs simulated at once (each run is single-threaded)"},
	}
}

// plan is what the flags ask for: a matrix of runs over one workload.
type plan struct {
	base     fleet.Config
	policies []string
	syncs    []fleet.Sync
	replicas []int
	// workload returns a fresh workload for each run.
	workload func() fleet.Workload
	// bound is the trace's infinite-cache hit rate; nil for agentic runs.
	bound    *float64
	jsonPath string
	parallel int
}

// readPlan validates the flags and loads the workload.
func readPlan(c *cli.Context) (plan, error) {
	p := plan{jsonPath: c.String("json"), parallel: c.Int("parallel")}
	steps := []func(*cli.Context, *plan) error{readFleet, readRouting, readGossip, readMatrix, readReport, readWorkload}
	for _, step := range steps {
		if err := step(c, &p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// check is one flag's validity.
type check struct {
	flag string
	bad  bool
	want string
	got  any
}

func firstBad(checks []check) error {
	for _, ch := range checks {
		if ch.bad {
			return badFlag(ch.flag, ch.want, ch.got)
		}
	}
	return nil
}

func readFleet(c *cli.Context, p *plan) error {
	p.base.Workers = c.Int("workers")
	p.base.Engine = sim.Config{KVCapacityTokens: c.Int("kv-capacity-tokens"), MaxNumSeqs: c.Int("max-num-seqs")}
	if err := firstBad([]check{
		{"workers", p.base.Workers <= 0, "> 0", p.base.Workers},
		{"kv-capacity-tokens", p.base.Engine.KVCapacityTokens <= 0, "> 0", p.base.Engine.KVCapacityTokens},
		{"max-num-seqs", p.base.Engine.MaxNumSeqs <= 0, "> 0", p.base.Engine.MaxNumSeqs},
	}); err != nil {
		return err
	}
	if err := p.base.Engine.WithDefaults().Validate(); err != nil {
		return fmt.Errorf("%w --kv-capacity-tokens or --max-num-seqs: %w", errBadFlag, err)
	}
	if c.IsSet("pd") {
		if c.IsSet("workers") {
			return badFlag("workers", "unset with --pd (P:D gives the fleet)", p.base.Workers)
		}
		var err error
		if p.base.Prefill, p.base.Decode, err = parsePD(c.String("pd")); err != nil {
			return err
		}
	}
	if err := readSlowdown(c, p); err != nil {
		return err
	}
	return readKills(c, p)
}

// readKills reads the repeated --kill ID:AT and --migration-limit.
func readKills(c *cli.Context, p *plan) error {
	limit := c.Int("migration-limit")
	if limit < 0 {
		return badFlag("migration-limit", ">= 0", limit)
	}
	p.base.MigrationLimit = limit
	if limit == 0 {
		p.base.MigrationLimit = fleet.MigrationOff // fleet's zero means the default
	}
	for _, spec := range c.StringSlice("kill") {
		ids, ats, found := strings.Cut(spec, ":")
		id, ierr := strconv.Atoi(ids)
		at, aerr := time.ParseDuration(ats)
		if !found || ierr != nil || aerr != nil {
			return badFlag("kill", "ID:AT, as 3:2s", spec)
		}
		p.base.Kills = append(p.base.Kills, fleet.Kill{Worker: affinity.WorkerID(id), At: at})
	}
	if err := p.base.Validate(); err != nil {
		return fmt.Errorf("%w --kill: %w", errBadFlag, err)
	}
	return nil
}

// readSlowdown reads the repeated --slowdown ID:FACTOR.
func readSlowdown(c *cli.Context, p *plan) error {
	total := p.base.Workers
	if p.base.Disaggregated() {
		total = p.base.Prefill + p.base.Decode
	}
	for _, spec := range c.StringSlice("slowdown") {
		ids, fs, found := strings.Cut(spec, ":")
		id, ierr := strconv.Atoi(ids)
		f, ferr := strconv.ParseFloat(fs, 64)
		if !found || ierr != nil || ferr != nil || id < 1 || id > total || sim.ValidateSlowdown(f) != nil {
			return badFlag("slowdown", fmt.Sprintf("ID:FACTOR with ID in [1, %d] and FACTOR > 0, as 1:4", total), spec)
		}
		if p.base.Slowdown == nil {
			p.base.Slowdown = map[affinity.WorkerID]float64{}
		}
		p.base.Slowdown[affinity.WorkerID(id)] = f
	}
	return nil
}

// parsePD reads "P:D" with both counts positive.
func parsePD(s string) (prefill, decode int, err error) {
	ps, ds, found := strings.Cut(s, ":")
	prefill, perr := strconv.Atoi(ps)
	decode, derr := strconv.Atoi(ds)
	if !found || perr != nil || derr != nil || prefill <= 0 || decode <= 0 {
		return 0, 0, badFlag("pd", "P:D with positive counts, as 4:6", s)
	}
	return prefill, decode, nil
}

func readRouting(c *cli.Context, p *plan) error {
	p.base.DecodePolicy = c.String("decode-policy")
	p.base.BlockSize = c.Int("block-size")
	p.base.Thresholds = affinity.Thresholds{
		CacheThreshold: c.Float64("cache-threshold"),
		BalanceAbs:     c.Float64("balance-abs-threshold"), BalanceRel: c.Float64("balance-rel-threshold"),
		HotLoad: c.Float64("hot-prefix-load"), HotOwners: c.Int("hot-prefix-owners"),
	}
	if p.base.BlockSize <= 0 {
		return badFlag("block-size", "> 0", p.base.BlockSize)
	}
	// The router's own check of the same flags.
	if err := p.base.Thresholds.Validate(); err != nil {
		return fmt.Errorf("%w %w", errBadFlag, err)
	}
	if cfg := (fleet.Config{Workers: 1, DecodePolicy: p.base.DecodePolicy}); cfg.Validate() != nil {
		return badFlag("decode-policy", "one of "+strings.Join(affinity.PolicyNames, ", "), p.base.DecodePolicy)
	}
	return nil
}

// finiteNonNegative is false for negatives, NaN and +Inf.
func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

func readGossip(c *cli.Context, p *plan) error {
	p.base.GossipInterval = c.Duration("gossip-interval")
	p.base.GossipFlushInterval = c.Duration("gossip-flush-interval")
	p.base.GossipDelay = c.Duration("gossip-delay")
	p.base.GossipLoss = c.Float64("gossip-loss")
	p.base.NoPeerShare = !c.Bool("peer-share")
	p.base.NoDemotion = !c.Bool("demote-superseded")
	p.base.OverloadOnReports = !c.Bool("share-in-overload")
	p.base.Placer = c.Bool("placer")
	p.base.PlacerAnswerLoss = c.Float64("placer-answer-loss")
	p.base.Door = c.Bool("door")
	p.base.EngineScrapeInterval = time.Duration(c.Float64("engine-scrape-interval-secs") * float64(time.Second))
	p.base.NoCalibration = !c.Bool("calibrate-index")
	p.base.NoCalibrationGossip = !c.Bool("gossip-calibration")
	p.base.Seed = c.Int64("seed")
	p.base.StickySessions = c.String("balance") == "session"
	if b := c.String("balance"); b != "random" && b != "session" {
		return badFlag("balance", "random or session", b)
	}
	if p.base.GossipDelay == 0 {
		p.base.GossipDelay = -1 // fleet's "none"; its zero means the default
	}
	return firstBad([]check{
		{"gossip-interval", p.base.GossipInterval <= 0, "> 0", p.base.GossipInterval},
		{"gossip-flush-interval", p.base.GossipFlushInterval <= 0, "> 0", p.base.GossipFlushInterval},
		{"engine-scrape-interval-secs", p.base.EngineScrapeInterval <= 0, "> 0", p.base.EngineScrapeInterval},
		{"gossip-delay", c.Duration("gossip-delay") < 0, ">= 0", c.Duration("gossip-delay")},
		{"gossip-loss", !(p.base.GossipLoss >= 0 && p.base.GossipLoss < 1), "in [0, 1)", p.base.GossipLoss},
		{"placer-answer-loss", !(p.base.PlacerAnswerLoss >= 0 && p.base.PlacerAnswerLoss < 1), "in [0, 1)", p.base.PlacerAnswerLoss},
	})
}

// readMatrix reads the lists whose product is the set of runs.
func readMatrix(c *cli.Context, p *plan) error {
	p.replicas = c.IntSlice("replicas")
	for _, n := range p.replicas {
		if n <= 0 {
			return badFlag("replicas", "positive counts", n)
		}
	}
	for _, s := range c.StringSlice("sync") {
		cfg := fleet.Config{Workers: 1, Sync: fleet.Sync(s)}
		if s == "" || cfg.Validate() != nil {
			return badFlag("sync", "gossip, none or shared", s)
		}
		p.syncs = append(p.syncs, fleet.Sync(s))
	}
	for _, label := range c.StringSlice("policies") {
		if err := checkPolicy(label); err != nil {
			return err
		}
		p.policies = append(p.policies, label)
	}
	return firstBad([]check{
		{"replicas", len(p.replicas) == 0, "at least one count", p.replicas},
		{"sync", len(p.syncs) == 0, "at least one mode", p.syncs},
		{"policies", len(p.policies) == 0, "at least one policy", p.policies},
	})
}

// checkPolicy refuses a policy label fleet would not run.
func checkPolicy(label string) error {
	policy, placement, err := fleet.ParsePolicy(label)
	if err == nil && policy != "" {
		err = (fleet.Config{Workers: 1, Policy: policy, MissPlacement: placement}).Validate()
	}
	if err != nil || policy == "" {
		return badFlag("policies", "names among "+strings.Join(affinity.PolicyNames, ", ")+
			" (cache-aware ones optionally :"+strings.Join(affinity.PlacementNames, ", :")+")", label)
	}
	return nil
}

func readReport(_ *cli.Context, p *plan) error {
	if p.parallel <= 0 {
		return badFlag("parallel", "> 0", p.parallel)
	}
	if p.jsonPath == "" {
		return nil
	}
	if info, err := os.Stat(filepath.Dir(p.jsonPath)); err != nil || !info.IsDir() {
		return badFlag("json", "a file in an existing directory", p.jsonPath)
	}
	return nil
}

// readWorkload reads either the trace or the agentic flags.
func readWorkload(c *cli.Context, p *plan) error {
	switch trace := c.String("trace"); {
	case trace != "" && c.Bool("agentic"):
		return badFlag("agentic", "not with --trace", true)
	case trace != "":
		if err := refuseOtherMode(c, agenticOnly, "--trace"); err != nil {
			return err
		}
		return readTrace(c, p, trace)
	case c.Bool("agentic"):
		if err := refuseOtherMode(c, traceOnly, "--agentic"); err != nil {
			return err
		}
		return readAgentic(c, p)
	}
	return badFlag("trace", "a trace file, or --agentic", `""`)
}

func readTrace(c *cli.Context, p *plan, path string) error {
	limit, scale, spread := c.Int("limit"), c.Float64("rate-scale"), c.Duration("arrival-spread")
	if err := firstBad([]check{
		{"limit", limit < 0, ">= 0", limit},
		{"rate-scale", !(scale > 0) || scale > 1e9, "in (0, 1e9]", scale},
		{"arrival-spread", spread < 0, ">= 0", spread},
	}); err != nil {
		return err
	}
	records, err := workload.LoadTraceFile(path, limit)
	if err != nil {
		return fmt.Errorf("%w --trace: %w", errBadFlag, err)
	}
	records = workload.SpreadArrivals(records, spread, c.Uint64("arrival-seed"))
	bound := workload.Stats(records).TokenHitRate
	p.bound = &bound
	p.workload = func() fleet.Workload { return fleet.NewTrace(records, scale) }
	return nil
}

// traceOnly and agenticOnly are the flags that shape one kind of workload.
var (
	traceOnly   = []string{"limit", "rate-scale", "arrival-spread", "arrival-seed"}
	agenticOnly = []string{"sessions", "turns", "system-prompt-tokens", "task-tokens", "observation-tokens",
		"answer-tokens", "think-time", "groups", "observation-spread"}
)

// refuseOtherMode refuses any of flags set along with mode.
func refuseOtherMode(c *cli.Context, flags []string, mode string) error {
	for _, flag := range flags {
		if c.IsSet(flag) {
			return badFlag(flag, "unset with "+mode, c.Value(flag))
		}
	}
	return nil
}

func readAgentic(c *cli.Context, p *plan) error {
	cfg := workload.AgenticConfig{
		Sessions: c.Int("sessions"), Turns: c.Int("turns"),
		SystemPromptTokens: c.Int("system-prompt-tokens"), TaskTokens: c.Int("task-tokens"),
		ObservationTokens: c.Int("observation-tokens"), AnswerTokens: c.Int("answer-tokens"),
		ThinkTime: c.Duration("think-time"), Seed: c.Int64("seed"),
	}
	groups := fleet.Groups{Count: c.Int("groups"), ObservationSpread: c.Float64("observation-spread")}
	if err := firstBad([]check{
		{"sessions", cfg.Sessions <= 0, "> 0", cfg.Sessions},
		{"turns", cfg.Turns <= 0, "> 0", cfg.Turns},
		{"system-prompt-tokens", cfg.SystemPromptTokens <= 0, "> 0", cfg.SystemPromptTokens},
		{"task-tokens", cfg.TaskTokens <= 0, "> 0", cfg.TaskTokens},
		{"observation-tokens", cfg.ObservationTokens <= 0, "> 0", cfg.ObservationTokens},
		{"answer-tokens", cfg.AnswerTokens <= 0, "> 0", cfg.AnswerTokens},
		{"think-time", cfg.ThinkTime < 0, ">= 0", cfg.ThinkTime},
		{"groups", groups.Count <= 0 || groups.Count > cfg.Sessions, "in [1, --sessions]", groups.Count},
		{"observation-spread", !finiteNonNegative(groups.ObservationSpread), "a finite number >= 0", groups.ObservationSpread},
	}); err != nil {
		return err
	}
	if _, err := fleet.NewAgenticGroups(cfg, groups); err != nil {
		return fmt.Errorf("%w --turns, --observation-tokens, --observation-spread or --answer-tokens: %w", errBadFlag, err)
	}
	p.workload = func() fleet.Workload {
		a, _ := fleet.NewAgenticGroups(cfg, groups) // accepted above
		return a
	}
	return nil
}
