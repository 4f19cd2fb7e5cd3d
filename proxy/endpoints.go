package proxy

import (
	"github.com/valyala/fastjson"
)

// endpoint is one inference API the router routes by prefix: where it is,
// how its routing text is read from a body, and whether it goes through
// prefill/decode disaggregation when that is on (the others go whole to
// the decode workers, which can serve a request alone).
type endpoint struct {
	path       string
	text       func(*fastjson.Value) ([]byte, error)
	pd         bool
	needsModel bool // without a model, a request goes to any worker
	id         int  // position in endpoints: per-route metrics are arrays
}

// The endpoints, vllm-router's set: OpenAI's, vLLM's rerank, and SGLang's
// native /generate.
var (
	completions = &endpoint{path: "/v1/completions", pd: true, needsModel: true,
		text: func(v *fastjson.Value) ([]byte, error) { return renderPrompt(v.Get("prompt"), "prompt") }}
	chatCompletions = &endpoint{path: "/v1/chat/completions", pd: true, needsModel: true,
		text: func(v *fastjson.Value) ([]byte, error) { return renderMessages(v.Get("messages")) }}
	embeddings = &endpoint{path: "/v1/embeddings",
		text: func(v *fastjson.Value) ([]byte, error) { return renderPrompt(v.Get("input"), "input") }}
	rerank     = &endpoint{path: "/v1/rerank", text: rerankText}
	rerankBare = &endpoint{path: "/rerank", text: rerankText}
	responses  = &endpoint{path: "/v1/responses", text: responsesText}
	generate   = &endpoint{path: "/generate", text: generateText}

	// The endpoints forwarded whole, without routing text: named for the
	// metrics.
	storedResponses = &endpoint{path: "/v1/responses/{id}"}
	workerInfo      = &endpoint{path: "/get_model_info|/get_server_info|/health_generate"}

	endpoints = []*endpoint{completions, chatCompletions, embeddings, rerank, rerankBare, responses, generate,
		storedResponses, workerInfo}
)

func init() {
	for i, ep := range endpoints {
		ep.id = i
	}
}

// endpointAt returns the routed endpoint served at path, or nil.
func endpointAt(path []byte) *endpoint {
	for _, ep := range endpoints {
		if ep.text != nil && string(path) == ep.path {
			return ep
		}
	}
	return nil
}

// rerankText is the query, then the documents (strings or {"text"}): the
// query is what a reranking session shares.
func rerankText(v *fastjson.Value) ([]byte, error) {
	q := v.Get("query")
	if q == nil || q.Type() != fastjson.TypeString {
		return nil, errorf(ErrBadRequest, "missing required field: query")
	}
	out := append(append([]byte(nil), q.GetStringBytes()...), '\n') // never append to the parser's buffer
	docs := v.Get("documents")
	if docs == nil || docs.Type() != fastjson.TypeArray {
		return nil, errorf(ErrBadRequest, "field documents must be an array")
	}
	for _, d := range docs.GetArray() {
		if d.Type() == fastjson.TypeString {
			out = append(out, d.GetStringBytes()...)
		} else {
			out = append(out, d.GetStringBytes("text")...)
		}
		out = append(out, '\n')
	}
	return out, nil
}

// responsesText is the Responses API's instructions, then its input: a
// string, or message items rendered as chat messages are.
func responsesText(v *fastjson.Value) ([]byte, error) {
	out := append([]byte(nil), v.GetStringBytes("instructions")...)
	in := v.Get("input")
	switch {
	case in == nil:
		return nil, errorf(ErrBadRequest, "missing required field: input")
	case in.Type() == fastjson.TypeString:
		return append(out, in.GetStringBytes()...), nil
	case in.Type() == fastjson.TypeArray:
		items, err := renderMessages(in)
		return append(out, items...), err
	}
	return nil, errorf(ErrBadRequest, "field input must be a string or an array")
}

// generateText is SGLang's /generate text, or its input_ids as JSON.
func generateText(v *fastjson.Value) ([]byte, error) {
	if t := v.Get("text"); t != nil {
		return renderPrompt(t, "text")
	}
	if ids := v.Get("input_ids"); ids != nil {
		return ids.MarshalTo(nil), nil
	}
	return nil, errorf(ErrBadRequest, "missing required field: text or input_ids")
}
