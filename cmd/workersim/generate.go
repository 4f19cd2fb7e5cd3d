package main

import (
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// Defaults of SGLang's /generate.
const (
	defaultMaxNewTokens = 128 // sampling_params.max_new_tokens
	fillerTokenID       = 1   // the id of fillerToken in output_ids
)

// handleGenerate serves SGLang's native POST /generate: one prompt given as text or input_ids,
// sampling_params.max_new_tokens, stream (data: events with the text so far, then [DONE]), and
// the bootstrap fields of SGLang's prefill/decode disaggregation.
func (api *inferenceAPI) handleGenerate(ctx *fasthttp.RequestCtx) {
	api.jobs.serveJob(ctx, api.generateJob)
}

func (api *inferenceAPI) generateJob(parser *fastjson.Parser, body []byte) (job, error) {
	req, rid, err := api.parseGenerate(parser, body)
	if err != nil {
		return job{}, err
	}
	p, err := api.planner.plan(req)
	if err != nil {
		return job{}, err
	}
	if rid == "" {
		rid = api.ids.next("")
	}
	return singleJob(p, &generateRenderer{rid: rid, maxTokens: p.sub.maxTokens}), nil
}

// parseGenerate reads a /generate body into the generation it asks for and its rid.
func (api *inferenceAPI) parseGenerate(p *fastjson.Parser, body []byte) (inferenceRequest, string, error) {
	v, err := parseObject(p, body)
	if err != nil {
		return inferenceRequest{}, "", err
	}
	var req inferenceRequest
	for _, step := range []func(*fastjson.Value) error{req.readModel, req.readStream, req.readBootstrap} {
		if err := step(v); err != nil {
			return req, "", err
		}
	}
	if req.model, err = api.models.resolveModel(req.model); err != nil {
		return req, "", err
	}
	if req.prompt, err = readGeneratePrompt(v, api.cfg.engine.BytesPerToken); err != nil {
		return req, "", err
	}
	if req.maxTokens, err = readMaxNewTokens(v.Get("sampling_params")); err != nil {
		return req, "", err
	}
	rid, _, err := optionalString(v, "rid")
	return req, rid, err
}

// readGeneratePrompt reads text or input_ids, exactly one of them; a batch (an array of texts or
// of id lists) is refused.
func readGeneratePrompt(v *fastjson.Value, width int) ([]byte, error) {
	text, hasText, err := optionalString(v, "text")
	if err != nil {
		return nil, fmt.Errorf("%w (workersim serves one prompt per /generate, not a batch)", err)
	}
	ids := v.Get("input_ids")
	hasIDs := ids != nil && ids.Type() != fastjson.TypeNull
	switch {
	case hasText && hasIDs:
		return nil, fmt.Errorf("%w: give text or input_ids, not both", errBadRequest)
	case hasText:
		return []byte(text), nil
	case hasIDs:
		return appendTokenIDs(nil, ids, width)
	}
	return nil, fmt.Errorf("%w: text or input_ids is required", errBadRequest)
}

func readMaxNewTokens(params *fastjson.Value) (int, error) {
	if params == nil || params.Type() == fastjson.TypeNull {
		return defaultMaxNewTokens, nil
	}
	if params.Type() != fastjson.TypeObject {
		return 0, fmt.Errorf("%w: sampling_params must be an object", errBadRequest)
	}
	return optionalPositiveInt(params, "max_new_tokens", defaultMaxNewTokens)
}

// generateRenderer renders SGLang's /generate answers.
type generateRenderer struct {
	rid       string
	maxTokens int
}

var _ streamRenderer = (*generateRenderer)(nil)

func (r *generateRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	return r.appendOutput(dst, final[0])
}

// appendToken appends the chunk of a stream: like SGLang by default, each carries the whole
// text and output ids so far; the last one its finish_reason.
func (r *generateRenderer) appendToken(dst []byte, u sim.Usage) []byte {
	dst = append(dst, "data: "...)
	dst = r.appendOutput(dst, u)
	return append(dst, "\n\n"...)
}

func (r *generateRenderer) appendEnd(dst []byte, _ sim.Usage) []byte {
	return append(dst, doneEvent...)
}

// appendOutput appends {"text","output_ids","meta_info"} after u.Completion tokens.
func (r *generateRenderer) appendOutput(dst []byte, u sim.Usage) []byte {
	dst = append(dst, `{"text":`...)
	dst = appendJSONString(dst, repeatToken(u.Completion))
	dst = append(dst, `,"output_ids":[`...)
	for i := range u.Completion {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, fillerTokenID, 10)
	}
	dst = append(dst, `],"meta_info":{"id":`...)
	dst = appendJSONString(dst, r.rid)
	dst = append(dst, `,"finish_reason":`...)
	if u.Completion >= r.maxTokens {
		dst = append(dst, `{"type":"length","length":`...)
		dst = strconv.AppendInt(dst, int64(u.Completion), 10)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Completion), 10)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	return append(dst, "}}"...)
}
