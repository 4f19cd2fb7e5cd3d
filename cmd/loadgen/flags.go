package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/sim/workload"
)

// errBadFlag marks a flag value refused at start; the message names the flag.
var errBadFlag = errors.New("invalid flag")

// badFlag reports an invalid value of flag.
func badFlag(flag, want string, got any) error {
	return fmt.Errorf("%w --%s: want %s, got %v", errBadFlag, flag, want, got)
}

// Defaults of the flags that bound a run.
const (
	defaultDuration       = time.Hour
	defaultRequestTimeout = 10 * time.Minute
)

// commonFlags are the flags of every command: where to send, how long, where to report.
func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "target", Required: true, Usage: "server URL (a router replica or a worker), repeatable: each request goes to a random one, and to another when its connection fails; the endpoint's path is appended"},
		&cli.StringFlag{Name: "balance", Value: balanceRandom, Usage: "how requests spread over the targets: random (each request to a random one) or session (every turn of an agentic session to the same one, as a session-sticky load balancer)"},
		&cli.StringFlag{Name: "endpoint", Value: endpointCompletions, Usage: "API to call: completions (/v1/completions, prompt), chat (/v1/chat/completions, messages) or messages (Anthropic's /v1/messages)"},
		&cli.StringFlag{Name: "model", Value: "sim-model", Usage: `"model" of every request (workersim serves sim-model by default); empty leaves it out`},
		&cli.StringFlag{Name: "api-key", EnvVars: []string{"LOADGEN_API_KEY"}, Usage: "bearer token sent with every request"},
		&cli.DurationFlag{Name: "duration", Value: defaultDuration, Usage: "stop after this long, cancelling what is in flight"},
		&cli.DurationFlag{Name: "request-timeout", Value: defaultRequestTimeout, Usage: "fail a request that has not finished after this long"},
		&cli.StringFlag{Name: "json", Usage: "also write the report as JSON to this file"},
		&cli.StringFlag{Name: "requests-json", Usage: "also write one JSON line per finished request to this file (when it started, session and turn, target, worker, TTFT, latency, tokens): a tail read request by request"},
	}
}

// replayFlags are the flags of the replay command, after commonFlags.
func replayFlags() []cli.Flag {
	return append(commonFlags(),
		&cli.StringFlag{Name: "trace", Required: true, Usage: "Mooncake-format JSONL trace"},
		&cli.IntFlag{Name: "limit", Usage: "replay only the first N records (0: all)"},
		&cli.Float64Flag{Name: "rate-scale", Value: 1, Usage: "divide the trace's time by this: 10 replays ten times faster"},
		&cli.DurationFlag{Name: "arrival-spread", Usage: "move each trace record's arrival later by a uniform random offset below this, drawn from --arrival-seed: the shared conversation trace stamps its requests in 3 s steps, and 3s replays each step's requests spread over it instead of in one instant (0: as recorded)"},
		&cli.Uint64Flag{Name: "arrival-seed", Value: 1, Usage: "seed of --arrival-spread's offsets"},
		&cli.Int64Flag{Name: "seed", Usage: "family of synthesised texts; change it so a rerun does not hit the caches the last run warmed"},
		&cli.IntFlag{Name: "concurrency-limit", Usage: "at most this many requests in flight (0: unbounded, a pure open loop)"},
		&cli.IntFlag{Name: "max-output-tokens", Usage: "cap max_tokens at this (0: the trace's output_length)"},
	)
}

// agenticFlags are the flags of the agentic command, after commonFlags.
func agenticFlags() []cli.Flag {
	d := workload.DefaultAgenticConfig()
	return append(commonFlags(),
		&cli.IntFlag{Name: "sessions", Value: d.Sessions, Usage: "concurrent sessions"},
		&cli.IntFlag{Name: "turns", Value: d.Turns, Usage: "requests per session"},
		&cli.IntFlag{Name: "system-prompt-tokens", Value: d.SystemPromptTokens, Usage: "system prompt shared by all sessions, in tokens"},
		&cli.IntFlag{Name: "task-tokens", Value: d.TaskTokens, Usage: "each session's task statement, in tokens"},
		&cli.IntFlag{Name: "observation-tokens", Value: d.ObservationTokens, Usage: "mean tool output appended per turn, in tokens"},
		&cli.IntFlag{Name: "answer-tokens", Value: d.AnswerTokens, Usage: "max_tokens per turn, in tokens"},
		&cli.DurationFlag{Name: "think-time", Value: d.ThinkTime, Usage: "mean tool latency between turns"},
		&cli.Int64Flag{Name: "seed", Usage: "seed of the texts and random draws"},
		&cli.IntFlag{Name: "tools", Value: defaultAgentTools, Usage: "on chat and messages, the tools every session declares: each turn is then the agent's conversation, every earlier turn the model's call of a tool and the tool's output as its result (0: a system message and one growing user message)"},
		&cli.StringSliceFlag{Name: "models", Usage: "models the sessions use instead of --model (LoRA adapters, say), each session one for all its turns, drawn by --model-zipf"},
		&cli.Float64Flag{Name: "model-zipf", Value: 1, Usage: "popularity of --models: the j-th is drawn with weight 1/j^s (0: all alike)"},
	)
}

// defaultAgentTools is how many tools an agentic session declares (--tools).
const defaultAgentTools = 20

// commonConfig is what the common flags say.
type commonConfig struct {
	targets                           []string
	endpoint, model, apiKey, jsonPath string
	requestsPath                      string // --requests-json; empty: no per-request lines
	balance                           string
	duration, requestTimeout          time.Duration
}

// readCommon validates the common flags.
func readCommon(c *cli.Context) (commonConfig, error) {
	cfg := commonConfig{
		targets: c.StringSlice("target"), endpoint: c.String("endpoint"), model: c.String("model"),
		apiKey: c.String("api-key"), jsonPath: c.String("json"), requestsPath: c.String("requests-json"), duration: c.Duration("duration"),
		requestTimeout: c.Duration("request-timeout"), balance: c.String("balance"),
	}
	if cfg.balance != balanceRandom && cfg.balance != balanceSession {
		return cfg, badFlag("balance", "random or session", cfg.balance)
	}
	if _, ok := endpointPaths[cfg.endpoint]; !ok {
		return cfg, badFlag("endpoint", "completions, chat or messages", cfg.endpoint)
	}
	if _, err := endpointURLs(cfg.targets, cfg.endpoint); err != nil {
		return cfg, fmt.Errorf("%w --target: %w", errBadFlag, err)
	}
	if cfg.duration <= 0 {
		return cfg, badFlag("duration", "> 0", cfg.duration)
	}
	if cfg.requestTimeout <= 0 {
		return cfg, badFlag("request-timeout", "> 0", cfg.requestTimeout)
	}
	for _, out := range []struct{ flag, path string }{{"json", cfg.jsonPath}, {"requests-json", cfg.requestsPath}} {
		if out.path == "" {
			continue
		}
		if info, err := os.Stat(filepath.Dir(out.path)); err != nil || !info.IsDir() {
			return cfg, badFlag(out.flag, "a file in an existing directory", out.path)
		}
	}
	return cfg, nil
}

// readReplay validates the replay flags and loads the trace.
func readReplay(c *cli.Context) (replayPlan, error) {
	plan := replayPlan{
		rateScale: c.Float64("rate-scale"), maxOutputTokens: c.Int("max-output-tokens"),
		concurrencyLimit: c.Int("concurrency-limit"), seed: c.Int64("seed"),
	}
	for _, check := range []struct {
		flag string
		bad  bool
		want string
		got  any
	}{
		{"limit", c.Int("limit") < 0, ">= 0", c.Int("limit")},
		{"rate-scale", !(plan.rateScale > 0) || plan.rateScale > 1e9, "in (0, 1e9]", plan.rateScale},
		{"arrival-spread", c.Duration("arrival-spread") < 0, ">= 0", c.Duration("arrival-spread")},
		{"concurrency-limit", plan.concurrencyLimit < 0, ">= 0", plan.concurrencyLimit},
		{"max-output-tokens", plan.maxOutputTokens < 0, ">= 0", plan.maxOutputTokens},
	} {
		if check.bad {
			return plan, badFlag(check.flag, check.want, check.got)
		}
	}
	records, err := workload.LoadTraceFile(c.String("trace"), c.Int("limit"))
	if err != nil {
		return plan, fmt.Errorf("%w --trace: %w", errBadFlag, err)
	}
	plan.records = workload.SpreadArrivals(records, c.Duration("arrival-spread"), c.Uint64("arrival-seed"))
	return plan, nil
}

// readAgentic validates the agentic flags.
func readAgentic(c *cli.Context) (workload.AgenticConfig, error) {
	cfg := workload.AgenticConfig{
		Sessions: c.Int("sessions"), Turns: c.Int("turns"),
		SystemPromptTokens: c.Int("system-prompt-tokens"), TaskTokens: c.Int("task-tokens"),
		ObservationTokens: c.Int("observation-tokens"), AnswerTokens: c.Int("answer-tokens"),
		ThinkTime: c.Duration("think-time"), Seed: c.Int64("seed"),
	}
	for _, check := range []struct {
		flag  string
		value int
	}{
		{"sessions", cfg.Sessions}, {"turns", cfg.Turns}, {"system-prompt-tokens", cfg.SystemPromptTokens},
		{"task-tokens", cfg.TaskTokens}, {"observation-tokens", cfg.ObservationTokens}, {"answer-tokens", cfg.AnswerTokens},
	} {
		if check.value <= 0 {
			return cfg, badFlag(check.flag, "> 0", check.value)
		}
	}
	if cfg.ThinkTime < 0 {
		return cfg, badFlag("think-time", ">= 0", cfg.ThinkTime)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w --turns, --observation-tokens or --answer-tokens: %w", errBadFlag, err)
	}
	return cfg, nil
}
