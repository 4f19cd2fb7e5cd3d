package main

import (
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/internal/anthropicapi"
	"github.com/kvrouter/kvrouter/sim"
)

// Anthropic's Messages API as vLLM serves it: POST /v1/messages generates, streamed or whole,
// and POST /v1/messages/count_tokens counts a request's prompt. The prompt is rendered as the
// router renders it (sim.AppendMessagesJSON: tools, system, then the messages with their tool
// calls and results), so the engine caches the prefixes the router reasons about. Usage is in
// Anthropic's accounting: input_tokens are the prompt's tokens not read from the prefix cache,
// cache_read_input_tokens those that were.
const (
	pathMessages    = anthropicapi.Path
	pathCountTokens = anthropicapi.Path + "/count_tokens"
)

// handleMessages serves POST /v1/messages.
func (api *inferenceAPI) handleMessages(ctx *fasthttp.RequestCtx) {
	api.jobs.serveJob(ctx, api.messagesJob)
}

// messagesRequest is what the worker needs from a Messages API request, beyond what every
// generation needs.
type messagesRequest struct {
	inferenceRequest
	tool string // the tool the answer calls; "" for a text answer
}

func (api *inferenceAPI) messagesJob(parser *fastjson.Parser, body []byte) (job, error) {
	req, err := api.parseMessages(parser, body)
	if err != nil {
		return job{}, err
	}
	p, err := api.planner.plan(req.inferenceRequest)
	if err != nil {
		return job{}, err
	}
	r := &messagesRenderer{id: api.ids.next("msg_"), model: req.model, tool: req.tool, maxTokens: p.sub.maxTokens}
	if p.kvReply {
		r.kv = api.planner.appendKVReply
	}
	return singleJob(p, r), nil
}

// parseMessages reads a Messages API body: max_tokens is required, as Anthropic's API and
// vLLM require it.
func (api *inferenceAPI) parseMessages(parser *fastjson.Parser, body []byte) (messagesRequest, error) {
	v, err := parseObject(parser, body)
	if err != nil {
		return messagesRequest{}, err
	}
	var req messagesRequest
	if f := v.Get("max_tokens"); f == nil || f.Type() == fastjson.TypeNull {
		return req, fmt.Errorf("%w: max_tokens is required", errBadRequest)
	}
	r := &req.inferenceRequest
	for _, step := range []func(*fastjson.Value) error{r.readModel, r.readStream, r.readMaxTokens, r.readKVTransfer, r.readBootstrap, r.readCacheSalt} {
		if err := step(v); err != nil {
			return req, err
		}
	}
	if r.model, err = api.models.resolveModel(r.model); err != nil {
		return req, err
	}
	if req.tool, err = toolToCall(v); err != nil {
		return req, err
	}
	if r.prompt, err = sim.AppendMessagesJSON(nil, v); err != nil {
		return req, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return req, nil
}

// toolToCall decides what the simulated model answers: a call of a tool, or text. With tools it
// calls one (the one tool_choice names, else the first) unless tool_choice is none, or is auto
// and the last message brings a tool's result: then the agent has what it asked for, and
// answers in text. Without tools it answers in text.
func toolToCall(v *fastjson.Value) (string, error) {
	tools := v.GetArray("tools")
	choice := v.Get("tool_choice")
	kind := string(choice.GetStringBytes("type"))
	switch {
	case len(tools) == 0 || kind == "none":
		return "", nil
	case kind == "tool":
		name := choice.GetStringBytes("name")
		if len(name) == 0 {
			return "", fmt.Errorf("%w: tool_choice of type tool names no tool", errBadRequest)
		}
		return string(name), nil
	case kind != "any" && lastBringsAResult(v.GetArray("messages")):
		return "", nil
	}
	return string(tools[0].GetStringBytes("name")), nil
}

// lastBringsAResult reports whether the last message holds a tool_result.
func lastBringsAResult(messages []*fastjson.Value) bool {
	if len(messages) == 0 {
		return false
	}
	for _, b := range messages[len(messages)-1].GetArray("content") {
		if string(b.GetStringBytes("type")) == "tool_result" {
			return true
		}
	}
	return false
}

// handleCountTokens serves POST /v1/messages/count_tokens: {"input_tokens": n}, the tokens the
// engine's tokenizer makes of the request's prompt. It generates nothing.
func (tk *tokenizer) handleCountTokens(ctx *fasthttp.RequestCtx) {
	parser := tk.parsers.Get()
	defer tk.parsers.Put(parser)
	text, err := tk.countText(parser, ctx.PostBody())
	if err != nil {
		tk.reply.writeError(ctx, err)
		return
	}
	b := strconv.AppendInt([]byte(`{"input_tokens":`), int64(len(tk.cfg.engine.Tokens(nil, text))), 10)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '}'))
}

func (tk *tokenizer) countText(parser *fastjson.Parser, body []byte) ([]byte, error) {
	v, err := parseObject(parser, body)
	if err != nil {
		return nil, err
	}
	model, _, err := optionalString(v, "model")
	if err != nil {
		return nil, err
	}
	if _, err := tk.models.resolveModel(model); err != nil {
		return nil, err
	}
	text, err := sim.AppendMessagesJSON(nil, v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return text, nil
}
