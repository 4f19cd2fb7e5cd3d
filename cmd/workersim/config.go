package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/sim"
)

// role is the worker's part in prefill/decode disaggregation.
type role string

// The roles.
const (
	roleBoth    role = "both"    // serves everything (no disaggregation)
	rolePrefill role = "prefill" // computes prompts for remote decode workers
	roleDecode  role = "decode"  // generates from prompts computed remotely
)

// errBadFlag is wrapped by every configuration error; the message names the flag.
var errBadFlag = errors.New("invalid flag")

// serverConfig is the validated configuration of one simulated worker.
type serverConfig struct {
	host      string
	port      int    // 0 picks a free port
	workerID  string // empty: the bound host:port
	models    []string
	engine    sim.Config
	timeScale float64 // engine seconds per wall second
	role      role
	fault     fault
	seed      uint64 // seeds the errors fault's draws
	// textSeed seeds completions' text (textGen) when textSeeded; otherwise it is filler tokens.
	textSeed   uint64
	textSeeded bool

	embeddingDims         int           // length of /v1/embeddings vectors
	maxStoredResponses    int           // Responses API store bound, LRU beyond it
	healthGenerateTimeout time.Duration // wall time /health_generate waits for its token

	// kvEvents and kvEventsReplay are where the engine's KV-cache events are published and
	// replayed (vLLM's --kv-events-config endpoint and replay_endpoint); empty: not published.
	kvEvents, kvEventsReplay string
	// kvEventsConnect dials kvEvents rather than binding it (vLLM dials an
	// endpoint that is not a wildcard: a router's bound socket), and
	// kvEventsTopic is every message's topic (llm-d's kv@<host>@<model>).
	kvEventsConnect bool
	kvEventsTopic   string

	// lora serves LoRA adapters (--lora-modules, or --max-loras set): loras at start, more at
	// run time; the engine's MaxLoras and LoraSwapMs say how it runs them.
	lora  bool
	loras []loraModule
}

// Defaults of the flags of the extra endpoints.
const (
	defaultEmbeddingDims         = 64
	maxEmbeddingDims             = 1 << 16
	defaultMaxStoredResponses    = 1024
	defaultHealthGenerateTimeout = 20 * time.Second // SGLang's health-check timeout
)

// validate refuses a configuration that cannot serve, naming the flag at fault.
func (c serverConfig) validate() error {
	checks := []struct {
		flag string
		ok   bool
		want string
	}{
		{"host", c.host != "", "a host name or address"},
		{"port", c.port >= 0 && c.port <= 65535, "0..65535"},
		{"model", len(c.models) > 0 && !hasEmpty(c.models), "at least one non-empty model name"},
		{"kv-capacity-tokens", c.engine.KVCapacityTokens >= c.engine.BlockTokens,
			"at least one block of " + strconv.Itoa(c.engine.BlockTokens) + " tokens"},
		{"max-num-seqs", c.engine.MaxNumSeqs >= 1, "at least 1"},
		{"max-num-batched-tokens", c.engine.MaxBatchedTokens >= 1, "at least 1"},
		{"time-scale", c.timeScale > 0 && !math.IsInf(c.timeScale, 0), "a positive number"},
		{"role", c.role == roleBoth || c.role == rolePrefill || c.role == roleDecode,
			"prefill, decode or both"},
		{"embedding-dimensions", c.embeddingDims >= 1 && c.embeddingDims <= maxEmbeddingDims,
			"1.." + strconv.Itoa(maxEmbeddingDims)},
		{"max-stored-responses", c.maxStoredResponses >= 1, "at least 1"},
		{"health-generate-timeout", c.healthGenerateTimeout > 0, "a positive duration"},
		{"kv-events-endpoint", c.kvEvents == "" || isTCPEndpoint(c.kvEvents), "tcp://host:port"},
		{"kv-events-replay-endpoint", c.kvEventsReplay == "" || c.kvEvents != "" && isTCPEndpoint(c.kvEventsReplay),
			"tcp://host:port, with --kv-events-endpoint"},
		{"kv-events-connect", !c.kvEventsConnect || c.kvEvents != "", "--kv-events-endpoint to dial"},
		{"kv-events-topic", len(c.kvEventsTopic) <= 256, "at most 256 bytes"},
		{"max-loras", !c.lora || c.engine.MaxLoras >= 1, "at least 1"},
		{"lora-swap-ms", c.engine.LoraSwapMs >= 0 && !math.IsInf(c.engine.LoraSwapMs, 0), "a duration in ms, 0 or more"},
		{"lora-modules", len(c.loras) <= maxAdapters, "at most " + strconv.Itoa(maxAdapters)},
	}
	for _, ch := range checks {
		if !ch.ok {
			return fmt.Errorf("%w --%s: want %s", errBadFlag, ch.flag, ch.want)
		}
	}
	return nil
}

// isTCPEndpoint reports whether e is tcp://host:port.
func isTCPEndpoint(e string) bool {
	rest, ok := strings.CutPrefix(e, "tcp://")
	if !ok {
		return false
	}
	host, port, err := net.SplitHostPort(rest)
	return err == nil && host != "" && port != ""
}

func hasEmpty(names []string) bool {
	for _, n := range names {
		if n == "" {
			return true
		}
	}
	return false
}

// serves reports whether the worker serves model (empty: the default, its first model).
func (c serverConfig) serves(model string) bool {
	if model == "" {
		return true
	}
	for _, m := range c.models {
		if m == model {
			return true
		}
	}
	return false
}

// address is the host:port to listen on.
func (c serverConfig) address() string {
	return net.JoinHostPort(c.host, strconv.Itoa(c.port))
}
