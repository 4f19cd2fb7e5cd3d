package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// handleEmbeddings serves POST /v1/embeddings as vLLM does for an embedding model: input is a
// string, an array of strings, an array of token ids or an array of such arrays (or, as vLLM's
// chat form, messages). Each input is one engine request that costs its prefill.
func (api *inferenceAPI) handleEmbeddings(ctx *fasthttp.RequestCtx) {
	api.jobs.serveJob(ctx, api.embeddingsJob)
}

// embeddingsRequest is what the worker needs from an embeddings request.
type embeddingsRequest struct {
	model  string
	inputs []embedInput
	base64 bool // encoding_format "base64": little-endian float32s, base64-encoded
	dims   int  // dimensions; 0 for the model's
}

func (api *inferenceAPI) embeddingsJob(parser *fastjson.Parser, body []byte) (job, error) {
	req, err := api.parseEmbeddings(parser, body)
	if err != nil {
		return job{}, err
	}
	r := &embeddingsRenderer{
		id: api.ids.next("embd-"), created: api.created, model: req.model, req: req,
		dims: api.cfg.embeddingDims, width: api.cfg.engine.BytesPerToken,
	}
	return job{subs: prefillOnly(req.inputs), render: r, pooling: true}, nil
}

// prefillOnly submits each input as an engine request that ends with its prefill: the engine's
// one token stands for the pooled output.
func prefillOnly(inputs []embedInput) []submission {
	subs := make([]submission, len(inputs))
	for i, in := range inputs {
		subs[i] = submission{prompt: in.text, maxTokens: 1, pooled: true}
	}
	return subs
}

func (api *inferenceAPI) parseEmbeddings(p *fastjson.Parser, body []byte) (embeddingsRequest, error) {
	v, err := parseObject(p, body)
	if err != nil {
		return embeddingsRequest{}, err
	}
	var req embeddingsRequest
	if req.model, _, err = optionalString(v, "model"); err != nil {
		return req, err
	}
	if req.model, err = api.models.resolveModel(req.model); err != nil {
		return req, err
	}
	if req.inputs, err = readEmbeddingInputs(v, api.cfg.engine.BytesPerToken); err != nil {
		return req, err
	}
	if req.base64, err = readEncodingFormat(v); err != nil {
		return req, err
	}
	req.dims, err = optionalPositiveInt(v, "dimensions", 0)
	if err == nil && req.dims > api.cfg.embeddingDims {
		err = fmt.Errorf("%w: dimensions %d exceeds the model's %d", errBadRequest, req.dims, api.cfg.embeddingDims)
	}
	return req, err
}

func readEmbeddingInputs(v *fastjson.Value, width int) ([]embedInput, error) {
	in := v.Get("input")
	if in == nil || in.Type() == fastjson.TypeNull {
		msgs := v.Get("messages")
		if msgs == nil {
			return nil, fmt.Errorf("%w: input is required", errBadRequest)
		}
		text, err := sim.AppendChatJSON(nil, msgs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadRequest, err)
		}
		return []embedInput{{text: text}}, nil
	}
	switch in.Type() {
	case fastjson.TypeString:
		return oneTextInput(in)
	case fastjson.TypeArray:
		return arrayInputs(in, width)
	}
	return nil, fmt.Errorf("%w: input must be a string, an array of strings or an array of token ids", errBadRequest)
}

func oneTextInput(in *fastjson.Value) ([]embedInput, error) {
	text := in.GetStringBytes()
	if len(text) == 0 {
		return nil, fmt.Errorf("%w: input must not be empty", errBadRequest)
	}
	return []embedInput{{text: append([]byte(nil), text...)}}, nil
}

// arrayInputs reads an array input: strings (one input each), numbers (one tokenised input) or
// arrays of numbers (one tokenised input each).
func arrayInputs(in *fastjson.Value, width int) ([]embedInput, error) {
	items := in.GetArray()
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: input must not be empty", errBadRequest)
	}
	if items[0].Type() == fastjson.TypeNumber {
		text, err := appendTokenIDs(nil, in, width)
		return []embedInput{{text: text, tokens: true}}, err
	}
	inputs := make([]embedInput, len(items))
	for i, item := range items {
		var err error
		switch item.Type() {
		case fastjson.TypeString:
			var one []embedInput
			one, err = oneTextInput(item)
			if err == nil {
				inputs[i] = one[0]
			}
		case fastjson.TypeArray:
			inputs[i].tokens = true
			inputs[i].text, err = appendTokenIDs(nil, item, width)
		default:
			err = fmt.Errorf("%w: input[%d] must be a string or an array of token ids", errBadRequest, i)
		}
		if err != nil {
			return nil, err
		}
	}
	return inputs, nil
}

func readEncodingFormat(v *fastjson.Value) (bool, error) {
	format, set, err := optionalString(v, "encoding_format")
	switch {
	case err != nil:
		return false, err
	case !set || format == "float":
		return false, nil
	case format == "base64":
		return true, nil
	}
	return false, fmt.Errorf("%w: encoding_format must be float or base64", errBadRequest)
}

// embeddingsRenderer renders vLLM's embedding response.
type embeddingsRenderer struct {
	id      string
	created int64
	model   string
	req     embeddingsRequest
	dims    int // the model's dimensions
	width   int // bytes per token id in tokenised inputs
}

var _ renderer = (*embeddingsRenderer)(nil)

func (r *embeddingsRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, r.id)
	dst = append(dst, `,"object":"list","created":`...)
	dst = strconv.AppendInt(dst, r.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, r.model)
	dst = append(dst, `,"data":[`...)
	for i, in := range r.req.inputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"object":"embedding","embedding":`...)
		dst = r.appendVector(dst, r.vector(in))
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	dst = appendPromptUsage(dst, final)
	return append(dst, '}')
}

// vector is the input's embedding, of the requested dimensions or else the model's.
func (r *embeddingsRenderer) vector(in embedInput) []float32 {
	dims := r.dims
	if r.req.dims > 0 {
		dims = r.req.dims
	}
	return embed(in, dims, r.width)
}

func (r *embeddingsRenderer) appendVector(dst []byte, v []float32) []byte {
	if r.req.base64 {
		raw := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, raw)
		return append(dst, '"')
	}
	dst = append(dst, '[')
	for i, x := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendFloat(dst, float64(x), 'g', -1, 32)
	}
	return append(dst, ']')
}

// appendPromptUsage appends the usage of prompt-only requests (embeddings, scores): their prompt
// tokens summed, with the cached ones vLLM's usage details carry.
func appendPromptUsage(dst []byte, final []sim.Usage) []byte {
	prompt, cached := 0, 0
	for _, u := range final {
		prompt += u.Prompt
		cached += u.Cached
	}
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	return append(dst, "}}"...)
}
