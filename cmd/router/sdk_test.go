package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// The official OpenAI Go SDK against a router process in front of
// workersim processes: what a client application would see.

func sdkClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func TestTheOpenAISDKCompletesAndStreams(t *testing.T) {
	router, workersim := binaries(t)
	_, u := startWorkersim(t, workersim, "w0")
	client := sdkClient(startRouterProcess(t, router, "--worker-urls", u))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "sim-model",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hello")}, MaxTokens: openai.Int(8)})
	if err != nil || len(comp.Choices) == 0 || comp.Usage.CompletionTokens == 0 {
		t.Fatalf("completion %+v, %v", comp, err)
	}
	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sim-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(8)})
	if err != nil || len(chat.Choices) == 0 || chat.Choices[0].Message.Content == "" {
		t.Fatalf("chat %+v, %v", chat, err)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "sim-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count to ten")}, MaxTokens: openai.Int(12)})
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.Len() == 0 {
		t.Fatalf("chat stream %q, %v", text.String(), err)
	}
	cstream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "sim-model",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Count")}, MaxTokens: openai.Int(6)})
	chunks := 0
	for cstream.Next() {
		chunks++
	}
	if err := cstream.Err(); err != nil || chunks == 0 {
		t.Fatalf("completion stream of %d chunks, %v", chunks, err)
	}
}

func TestTheOpenAISDKSeesTheRoutersErrors(t *testing.T) {
	router, workersim := binaries(t)
	_, u := startWorkersim(t, workersim, "w0")
	client := sdkClient(startRouterProcess(t, router, "--worker-urls", u))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.Message, "no-such-model") {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestTheOpenAISDKSeesAStreamCutByADyingWorker: the SDK must raise, not
// return a short answer as if it were whole.
func TestTheOpenAISDKSeesAStreamCutByADyingWorker(t *testing.T) {
	router, workersim := binaries(t)
	victim, u := startWorkersim(t, workersim, "victim", "--time-scale", "1")
	client := sdkClient(startRouterProcess(t, router, "--worker-urls", u))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "sim-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a long story")}, MaxTokens: openai.Int(2000)})
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	victim.kill()
	for stream.Next() {
	}
	err := stream.Err()
	var streamErr *ssestream.StreamError
	if err == nil || !errors.As(err, &streamErr) {
		t.Fatalf("the SDK ended the cut stream with %v, want its stream error", err)
	}
}
