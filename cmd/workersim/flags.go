package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/urfave/cli/v2"
)

// envPrefix prefixes the environment variable that backs every flag.
const envPrefix = "WORKERSIM_"

func env(flag string) []string {
	return []string{envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// flags is the command line of workersim; each flag also reads WORKERSIM_<NAME>.
func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "host", Value: "127.0.0.1", EnvVars: env("host"), Usage: "address to listen on"},
		&cli.IntFlag{Name: "port", Value: 8000, EnvVars: env("port"),
			Usage: "port to listen on; 0 picks a free one and prints \"listening on HOST:PORT\" first"},
		&cli.StringFlag{Name: "worker-id", EnvVars: env("worker-id"),
			Usage: "identity returned in header x-worker-id (default: the bound host:port)"},
		&cli.StringSliceFlag{Name: "model", Value: cli.NewStringSlice("sim-model"), EnvVars: env("model"),
			Usage: "model name served (repeatable)"},
		&cli.IntFlag{Name: "kv-capacity-tokens", Value: sim.DefaultKVCapacityTokens, EnvVars: env("kv-capacity-tokens"),
			Usage: "KV cache size in tokens"},
		&cli.IntFlag{Name: "max-num-seqs", Value: sim.DefaultMaxNumSeqs, EnvVars: env("max-num-seqs"),
			Usage: "sequences running at once; more wait in a queue"},
		&cli.IntFlag{Name: "max-num-batched-tokens", Value: sim.DefaultMaxBatchedTokens,
			EnvVars: env("max-num-batched-tokens"), Usage: "token budget of one engine step (chunked prefill)"},
		&cli.StringFlag{Name: "scheduling-policy", Value: "fcfs", EnvVars: env("scheduling-policy"),
			Usage: "fcfs, or priority: as vLLM v1's, the queue goes by the priority field (lower first); a waiting request never preempts a running one"},
		&cli.Float64Flag{Name: "time-scale", Value: 1, EnvVars: env("time-scale"),
			Usage: "speed-up of simulated time: 100 runs everything 100x faster"},
		&cli.StringFlag{Name: "role", Value: string(roleBoth), EnvVars: env("role"),
			Usage: "prefill/decode disaggregation role: prefill, decode or both"},
		&cli.StringFlag{Name: "fault", EnvVars: env("fault"),
			Usage: `fault at start, as POST /admin/fault takes it ({"mode":"degrade","factor":10}) or a bare mode name`},
		&cli.Uint64Flag{Name: "seed", Value: 1, EnvVars: env("seed"), Usage: "seed of the errors fault's draws"},
		&cli.Int64Flag{Name: "text-seed", Value: -1, EnvVars: env("text-seed"),
			Usage: "draw completions' text from this seed and the prompt (a request's seed field overrides it), so that a continuation of a generation yields exactly its rest; negative: every token is \" tok\""},
		&cli.IntFlag{Name: "embedding-dimensions", Value: defaultEmbeddingDims, EnvVars: env("embedding-dimensions"),
			Usage: "length of the vectors /v1/embeddings answers with"},
		&cli.IntFlag{Name: "max-stored-responses", Value: defaultMaxStoredResponses, EnvVars: env("max-stored-responses"),
			Usage: "responses the Responses API keeps for GET and previous_response_id; the least recently used go first"},
		&cli.DurationFlag{Name: "health-generate-timeout", Value: defaultHealthGenerateTimeout,
			EnvVars: env("health-generate-timeout"), Usage: "wall time /health_generate waits for its one token before 503"},
		&cli.StringFlag{Name: "kv-events-endpoint", EnvVars: env("kv-events-endpoint"),
			Usage: "publish the engine's KV-cache events here as vLLM does (tcp://127.0.0.1:5557; port 0 picks one); empty: none"},
		&cli.StringFlag{Name: "kv-events-replay-endpoint", EnvVars: env("kv-events-replay-endpoint"),
			Usage: "answer replay requests for the last 10,000 event batches here (tcp://127.0.0.1:5558); empty: none"},
		&cli.BoolFlag{Name: "kv-events-connect", EnvVars: env("kv-events-connect"),
			Usage: "dial --kv-events-endpoint (a router's --kv-events-bind) rather than bind it, as vLLM does for an endpoint that is not a wildcard; reconnects on its own"},
		&cli.StringFlag{Name: "kv-events-topic", EnvVars: env("kv-events-topic"),
			Usage: "the topic of every event message (llm-d's kv@<host:port>@<model>; vLLM's default is empty)"},
		&cli.GenericFlag{Name: "lora-modules", Value: &loraModulesFlag{}, EnvVars: env("lora-modules"),
			Usage: `LoRA adapter served from the start, vLLM's '{"name":"sql-lora","path":"/adapters/sql"}' or name=path (repeatable; its commas are the JSON's, not a list's); more load at run time (POST /v1/load_lora_adapter)`},
		&cli.IntFlag{Name: "max-loras", Value: 1, EnvVars: env("max-loras"),
			Usage: "LoRA adapters the engine holds in its slots and runs in one batch, as vLLM's; a request of another waits, and loading one costs --lora-swap-ms"},
		&cli.Float64Flag{Name: "lora-swap-ms", Value: defaultLoRASwapMs, EnvVars: env("lora-swap-ms"),
			Usage: "engine time a step takes longer for each adapter it loads into a slot"},
	}
}

// configFromCLI builds and validates the configuration from parsed flags.
func configFromCLI(c *cli.Context) (serverConfig, error) {
	f, err := parseFault(c.String("fault"))
	if err != nil {
		return serverConfig{}, fmt.Errorf("%w --fault: %w", errBadFlag, err)
	}
	engine := sim.DefaultConfig()
	engine.KVCapacityTokens = c.Int("kv-capacity-tokens")
	engine.MaxNumSeqs = c.Int("max-num-seqs")
	engine.MaxBatchedTokens = c.Int("max-num-batched-tokens")
	switch policy := c.String("scheduling-policy"); policy {
	case "fcfs":
	case "priority":
		engine.PriorityScheduling = true
	default:
		return serverConfig{}, fmt.Errorf("%w --scheduling-policy: %q is not fcfs or priority", errBadFlag, policy)
	}
	cfg := serverConfig{
		host:       c.String("host"),
		port:       c.Int("port"),
		workerID:   c.String("worker-id"),
		models:     c.StringSlice("model"),
		engine:     engine,
		timeScale:  c.Float64("time-scale"),
		role:       role(c.String("role")),
		fault:      f,
		seed:       c.Uint64("seed"),
		textSeed:   uint64(max(c.Int64("text-seed"), 0)),
		textSeeded: c.Int64("text-seed") >= 0,

		embeddingDims:         c.Int("embedding-dimensions"),
		maxStoredResponses:    c.Int("max-stored-responses"),
		healthGenerateTimeout: c.Duration("health-generate-timeout"),
		kvEvents:              c.String("kv-events-endpoint"),
		kvEventsReplay:        c.String("kv-events-replay-endpoint"),
		kvEventsConnect:       c.Bool("kv-events-connect"),
		kvEventsTopic:         c.String("kv-events-topic"),
	}
	cfg.engine.CacheEvents = cfg.kvEvents != ""
	if m, ok := c.Generic("lora-modules").(*loraModulesFlag); ok {
		if cfg.loras, err = parseLoRAModules(m.specs); err != nil {
			return serverConfig{}, fmt.Errorf("%w --lora-modules: %w", errBadFlag, err)
		}
	}
	if cfg.lora = len(cfg.loras) > 0 || c.IsSet("max-loras"); cfg.lora {
		cfg.engine.MaxLoras, cfg.engine.LoraSwapMs = c.Int("max-loras"), c.Float64("lora-swap-ms")
	}
	return cfg, cfg.validate()
}

// newApp returns the command; serve runs a validated configuration until it fails or the
// process is told to stop.
func newApp(stdout, stderr io.Writer, serve func(*cli.Context, serverConfig) error) *cli.App {
	return &cli.App{
		Name:            "workersim",
		Usage:           "a simulated vLLM worker with a prefix cache, realistic timing and faults",
		Flags:           flags(),
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return fmt.Errorf("%w: unexpected arguments %q", errBadFlag, c.Args().Slice())
			}
			cfg, err := configFromCLI(c)
			if err != nil {
				return err
			}
			return serve(c, cfg)
		},
	}
}
