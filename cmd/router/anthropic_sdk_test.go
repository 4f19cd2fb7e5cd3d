package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/kvrouter/kvrouter/internal/peers"
	"github.com/kvrouter/kvrouter/internal/testwait"
)

// The official Anthropic Go SDK against a tier of three router processes in
// front of a public vLLM simulator (llm-d-inference-sim, serving peerModel)
// and workersim (serving sim-model): what an agent built on the SDK sees.

const (
	peerModel = "fake-model"
	tierKey   = "agent-key"
)

// anthropicClient is an SDK client of the router at url, with the tier's
// key in the SDK's own header (x-api-key) and no retries of its own.
func anthropicClient(url string, opts ...option.RequestOption) anthropic.Client {
	return anthropicClientWithKey(url, tierKey, opts...)
}

// anthropicClientWithKey is anthropicClient with another key.
func anthropicClientWithKey(url, key string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(url + "/"), option.WithAPIKey(key),
		option.WithMaxRetries(0)}, opts...)...)
}

// startPeerSim starts llm-d-inference-sim serving model on a port of its
// own and waits for it to answer.
func startPeerSim(t *testing.T, model string, args ...string) string {
	t.Helper()
	return startPeerSimAt(t, freeAddr(t), nil, model, args...)
}

// startPeerSimAt is startPeerSim on addr, with env added to the
// simulator's environment (POD_IP names it in its KV events' topic).
func startPeerSimAt(t *testing.T, addr string, env []string, model string, args ...string) string {
	t.Helper()
	bin := peers.Sim(t)
	_, port, _ := net.SplitHostPort(addr)
	startWithEnv(t, env, bin, append([]string{"--port", port, "--model", model, "--force-dummy-tokenizer", "--max-num-seqs", "16",
		"--latency-calculator", "per-token", "--prefill-time-per-token", "200us", "--inter-token-latency", "2ms"}, args...)...)
	url := "http://" + addr
	testwait.EventuallyNil(t, 20*time.Second, func() error {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health %d", resp.StatusCode)
		}
		return nil
	}, "llm-d-inference-sim on %s", addr)
	return url
}

// agentTools are the tools of the test's agent.
var agentTools = []anthropic.ToolUnionParam{
	{OfTool: &anthropic.ToolParam{Name: "read_file", Description: anthropic.String("Reads a file of the workspace."),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}, Required: []string{"path"}}}},
	{OfTool: &anthropic.ToolParam{Name: "run_tests", Description: anthropic.String("Runs the package's tests."),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"package": map[string]any{"type": "string"}}}}},
}

// agentParams is an agent's request on model: its tools, its system
// prompt, then messages. llm-d-inference-sim (0.10.2) reads a system
// prompt only as a string, and the SDK sends it as text blocks: its
// requests have none.
func agentParams(model string, messages ...anthropic.MessageParam) anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{Model: model, MaxTokens: 24, Tools: agentTools, Messages: messages}
	if model != peerModel {
		p.System = []anthropic.TextBlockParam{{Text: strings.Repeat("You are a careful coding agent working in a Go repository. ", 40)}}
	}
	return p
}

var agentTask = anthropic.NewUserMessage(anthropic.NewTextBlock("The parser's tests fail. Find out why and fix it."))

// toolCall is the call the agent's first turn answered, or, from a model
// that answered in text, the call the agent makes of its own.
func toolCall(m *anthropic.Message) anthropic.MessageParam {
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			return m.ToParam()
		}
	}
	return anthropic.NewAssistantMessage(anthropic.NewTextBlock("Let me read it."),
		anthropic.NewToolUseBlock("toolu_agent_1", map[string]any{"path": "parse.go"}, "read_file"))
}

// toolUseID is the id of the call in m, an assistant's message.
func toolUseID(m anthropic.MessageParam) string {
	for _, b := range m.OfAssistant.Content {
		if b.OfToolUse != nil {
			return b.OfToolUse.ID
		}
	}
	return ""
}

// streamInOrder streams params through client and checks Anthropic's order
// of events: message_start first, the blocks each started, filled and
// stopped, message_delta, message_stop last. It returns the message.
func streamInOrder(t *testing.T, ctx context.Context, client anthropic.Client, params anthropic.MessageNewParams) anthropic.Message {
	t.Helper()
	stream := client.Messages.NewStreaming(ctx, params)
	var msg anthropic.Message
	var types []string
	open := map[int64]bool{}
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "content_block_start":
			open[ev.Index] = true
		case "content_block_delta":
			if !open[ev.Index] {
				t.Fatalf("a delta of block %d before its start: %q", ev.Index, types)
			}
		case "content_block_stop":
			delete(open, ev.Index)
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulating %q: %v", types, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream of %q: %v", types, err)
	}
	n := len(types)
	if n < 4 || types[0] != "message_start" || types[n-1] != "message_stop" || types[n-2] != "message_delta" || len(open) != 0 ||
		len(msg.Content) == 0 {
		t.Fatalf("events %q make %+v", types, msg)
	}
	return msg
}

// An agent of two turns on each model, every request through the next
// replica, whole and streamed: every call succeeds, the events come in
// order, count_tokens answers, and the engines' errors and the router's
// reach the SDK as its error type.
func TestTheAnthropicSDKThroughATierOfThree(t *testing.T) {
	routerBin, workersimBin := binaries(t)
	sim := startPeerSim(t, peerModel)
	_, wsim := startWorkersim(t, workersimBin, "w0")
	routers := startKVTier(t, routerBin, 3, []kvWorker{{url: sim}, {url: wsim}}, false, "--api-keys", tierKey)
	var clients []anthropic.Client
	for _, r := range routers {
		clients = append(clients, anthropicClient(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, model := range []string{peerModel, "sim-model"} {
		first, err := clients[0].Messages.New(ctx, agentParams(model, agentTask))
		if err != nil || len(first.Content) == 0 || first.Usage.InputTokens == 0 {
			t.Fatalf("%s, the first turn: %+v, %v", model, first, err)
		}
		call := toolCall(first)
		result := anthropic.NewUserMessage(anthropic.NewToolResultBlock(toolUseID(call),
			strings.Repeat("FAIL parse_test.go:12: want 3, got 4\n", 30), false))
		second := agentParams(model, agentTask, call, result)
		whole, err := clients[1].Messages.New(ctx, second)
		if err != nil || len(whole.Content) == 0 {
			t.Fatalf("%s, the second turn: %+v, %v", model, whole, err)
		}
		streamed := streamInOrder(t, ctx, clients[2], second)
		if model == "sim-model" && (whole.Usage.CacheReadInputTokens == 0 || streamed.Usage.CacheReadInputTokens == 0) {
			t.Errorf("the agent's second turn read nothing of its prefix from the cache: %+v, streamed %+v", whole.Usage, streamed.Usage)
		}
	}

	// count_tokens answers from an engine that serves it...
	count, err := clients[1].Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "sim-model",
		Messages: []anthropic.MessageParam{agentTask}})
	if err != nil || count.InputTokens == 0 {
		t.Fatalf("count_tokens: %+v, %v", count, err)
	}
	// ...and an engine's errors reach the SDK as its own: llm-d-inference-sim
	// serves no count_tokens, and fails a request that asks it to,
	var apiErr *anthropic.Error
	_, err = clients[2].Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: peerModel, Messages: []anthropic.MessageParam{agentTask}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("count_tokens of an engine without it: %v", err)
	}
	_, err = clients[0].Messages.New(ctx, agentParams(peerModel, agentTask), option.WithHeader("X-Return-Error", "400"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Fatalf("an error the engine answered: %v", err)
	}
	// workersim failing every request: the tier retries, and passes the last
	// answer on, in workersim's Anthropic shape.
	call(t, http.MethodPost, wsim+"/admin/fault", `{"mode":"errors","rate":1}`)
	_, err = clients[1].Messages.New(ctx, agentParams("sim-model", agentTask))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusInternalServerError || apiErr.Type() != "api_error" {
		t.Fatalf("an engine failing: %v", err)
	}
	call(t, http.MethodPost, wsim+"/admin/fault", `{"mode":"none"}`)
	// The router's own errors are in Anthropic's shape.
	_, err = clients[2].Messages.New(ctx, agentParams("no-such-model", agentTask))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Type() != "not_found_error" ||
		!strings.Contains(apiErr.Message, "no-such-model") {
		t.Fatalf("a model no worker serves: %v", err)
	}
	stranger := anthropicClientWithKey(routers[0], "wrong")
	_, err = stranger.Messages.New(ctx, agentParams("sim-model", agentTask))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Type() != "authentication_error" {
		t.Fatalf("a wrong key: %v", err)
	}
}

// A stream cut by a dying engine ends with the SDK's error, never as a
// whole answer: the router ends it with Anthropic's error event.
func TestTheAnthropicSDKSeesAStreamCutByADyingWorker(t *testing.T) {
	routerBin, workersimBin := binaries(t)
	victim, u := startWorkersim(t, workersimBin, "victim", "--time-scale", "1")
	client := anthropicClient(startRouterProcess(t, routerBin, "--worker-urls", u, "--api-keys", tierKey))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := agentParams("sim-model", agentTask)
	params.MaxTokens = 2000
	stream := client.Messages.NewStreaming(ctx, params)
	if !stream.Next() {
		t.Fatalf("no first event: %v", stream.Err())
	}
	victim.kill()
	for stream.Next() {
		if stream.Current().Type == "message_stop" {
			t.Fatal("the cut stream ended with message_stop")
		}
	}
	var apiErr *anthropic.Error
	if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.Type() != "api_error" {
		t.Fatalf("the SDK ended the cut stream with %v, want its error", err)
	}
}
