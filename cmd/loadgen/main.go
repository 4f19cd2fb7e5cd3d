package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/utils/clock"

	"github.com/kvrouter/kvrouter/sim/workload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the run winds down and reports; a second one kills at once.
	context.AfterFunc(ctx, stop)
	app := newApp(environment{stdout: os.Stdout, stderr: os.Stderr, clock: clock.RealClock{}, ticks: realTicks})
	err := app.RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// environment is what a command reads and writes besides its flags; tests substitute it.
type environment struct {
	stdout io.Writer // the report table
	stderr io.Writer // the progress line
	clock  Clock
	ticks  func() (<-chan time.Time, func()) // progress ticker
}

// newApp builds the command line.
func newApp(env environment) *cli.App {
	return &cli.App{
		Name:      "loadgen",
		Usage:     "drive an OpenAI-compatible server with a trace or agentic sessions and report what it did",
		Writer:    env.stdout,
		ErrWriter: env.stderr,
		Commands: []*cli.Command{
			{
				Name:   modeReplay,
				Usage:  "replay a Mooncake trace open loop at its timestamps",
				Flags:  replayFlags(),
				Action: func(c *cli.Context) error { return replayAction(c, env) },
			},
			{
				Name:   modeAgentic,
				Usage:  "run closed-loop agentic sessions whose prompts grow turn over turn",
				Flags:  agenticFlags(),
				Action: func(c *cli.Context) error { return agenticAction(c, env) },
			},
		},
	}
}

// replayAction is the replay command.
func replayAction(c *cli.Context, env environment) error {
	common, err := readCommon(c)
	if err != nil {
		return err
	}
	plan, err := readReplay(c)
	if err != nil {
		return err
	}
	return execute(c.Context, env, common, modeReplay, shape{}, func(r *run, ctx context.Context, start time.Time) {
		r.replay(ctx, start, plan)
	})
}

// agenticAction is the agentic command.
func agenticAction(c *cli.Context, env environment) error {
	common, err := readCommon(c)
	if err != nil {
		return err
	}
	cfg, err := readAgentic(c)
	if err != nil {
		return err
	}
	tools := c.Int("tools")
	if tools < 0 || tools > maxAgentTools {
		return badFlag("tools", fmt.Sprintf("in [0, %d]", maxAgentTools), tools)
	}
	zipf := c.Float64("model-zipf")
	if zipf < 0 || math.IsNaN(zipf) || math.IsInf(zipf, 0) {
		return badFlag("model-zipf", ">= 0", zipf)
	}
	mix := newModelMix(c.StringSlice("models"), zipf, cfg.Seed)
	// In chat and messages, the shared system prompt is the system message.
	body := shape{systemBytes: cfg.SystemPromptTokens * workload.TokenBytes, tools: tools}
	return execute(c.Context, env, common, modeAgentic, body, func(r *run, ctx context.Context, start time.Time) {
		r.mix = mix
		r.agentic(ctx, start, cfg)
	})
}

// maxAgentTools bounds --tools: the router refuses a request declaring more.
const maxAgentTools = 1024

// shape is how prompts become chat and messages bodies: the leading part of every prompt sent as
// the system message, and the tools of an agent (agent.go).
type shape struct {
	systemBytes, tools int
}

// execute runs drive against the targets and writes the report.
func execute(ctx context.Context, env environment, common commonConfig, mode string, body shape,
	drive func(*run, context.Context, time.Time)) error {
	client, err := newClient(clientConfig{
		targets: common.targets, endpoint: common.endpoint, systemBytes: body.systemBytes, tools: body.tools,
		apiKey: common.apiKey, timeout: common.requestTimeout, balance: common.balance,
	}, env.clock)
	if err != nil {
		return err
	}
	results := newCollector(len(common.targets))
	results.keepLines = common.requestsPath != ""
	r := &run{
		client: client, clock: env.clock, results: results, model: common.model,
		duration: common.duration, progress: env.stderr, ticks: env.ticks,
	}
	rep := r.execute(ctx, mode, func(ctx context.Context, start time.Time) { drive(r, ctx, start) })
	if err := rep.writeTable(env.stdout); err != nil {
		return err
	}
	if common.requestsPath != "" {
		if err := writeRequests(common.requestsPath, results.lines); err != nil {
			return err
		}
	}
	if common.jsonPath != "" {
		return rep.writeJSON(common.jsonPath)
	}
	return nil
}
