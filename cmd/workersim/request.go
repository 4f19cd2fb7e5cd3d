package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fastjson"
)

// defaultMaxTokens is the completion length when a request names none.
const defaultMaxTokens = 16

// errBadRequest is wrapped by every reason a request body is refused (HTTP 400).
var errBadRequest = errors.New("bad request")

// inferenceRequest is what the worker needs from an OpenAI completion or chat request.
type inferenceRequest struct {
	chat         bool
	model        string // empty: the first served model
	stream       bool
	includeUsage bool // stream_options.include_usage
	maxTokens    int
	prompt       []byte            // routing text, as the router renders it
	kv           *kvTransferParams // vLLM P/D, nil when absent or null
	bootstrap    bool              // SGLang P/D: bootstrap_room is set
}

// kvTransferParams is vLLM's kv_transfer_params object (NIXL connector).
type kvTransferParams struct {
	doRemoteDecode  bool
	doRemotePrefill bool
	remoteEngineID  string
	hasEngineID     bool
	remoteBlocks    int // number of remote_block_ids
	hasBlockIDs     bool
}

// parseInference reads an OpenAI request body with p. chat selects /v1/chat/completions
// (messages) over /v1/completions (prompt). The result shares no memory with p.
func parseInference(p *fastjson.Parser, body []byte, chat bool) (inferenceRequest, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return inferenceRequest{}, fmt.Errorf("%w: malformed JSON: %w", errBadRequest, err)
	}
	if v.Type() != fastjson.TypeObject {
		return inferenceRequest{}, fmt.Errorf("%w: the body must be a JSON object", errBadRequest)
	}
	r := inferenceRequest{chat: chat}
	steps := []func(*fastjson.Value) error{
		r.readModel, r.readStream, r.readMaxTokens, r.readPrompt, r.readKVTransfer, r.readBootstrap,
	}
	for _, step := range steps {
		if err := step(v); err != nil {
			return inferenceRequest{}, err
		}
	}
	return r, nil
}

func (r *inferenceRequest) readModel(v *fastjson.Value) error {
	m := v.Get("model")
	if m == nil || m.Type() == fastjson.TypeNull {
		return nil
	}
	b, err := m.StringBytes()
	if err != nil {
		return fmt.Errorf("%w: model must be a string", errBadRequest)
	}
	r.model = string(b)
	return nil
}

func (r *inferenceRequest) readStream(v *fastjson.Value) error {
	var err error
	if r.stream, err = optionalBool(v, "stream"); err != nil {
		return err
	}
	opts := v.Get("stream_options")
	if opts == nil || opts.Type() == fastjson.TypeNull {
		return nil
	}
	if opts.Type() != fastjson.TypeObject {
		return fmt.Errorf("%w: stream_options must be an object", errBadRequest)
	}
	r.includeUsage, err = optionalBool(opts, "include_usage")
	return err
}

// readMaxTokens takes max_completion_tokens, else max_tokens, else the default, as vLLM does.
func (r *inferenceRequest) readMaxTokens(v *fastjson.Value) error {
	r.maxTokens = defaultMaxTokens
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		f := v.Get(key)
		if f == nil || f.Type() == fastjson.TypeNull {
			continue
		}
		n, err := f.Int()
		if err != nil || n < 1 {
			return fmt.Errorf("%w: %s must be a positive integer", errBadRequest, key)
		}
		r.maxTokens = clampTokens(n)
	}
	return nil
}

func (r *inferenceRequest) readPrompt(v *fastjson.Value) error {
	var err error
	if r.chat {
		msgs := v.Get("messages")
		if msgs == nil {
			return fmt.Errorf("%w: messages is required", errBadRequest)
		}
		r.prompt, err = sim.AppendChatJSON(nil, msgs)
	} else {
		r.prompt, err = sim.AppendPromptJSON(nil, v.Get("prompt"))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return nil
}

func (r *inferenceRequest) readKVTransfer(v *fastjson.Value) error {
	kv := v.Get("kv_transfer_params")
	if kv == nil || kv.Type() == fastjson.TypeNull {
		return nil
	}
	if kv.Type() != fastjson.TypeObject {
		return fmt.Errorf("%w: kv_transfer_params must be an object", errBadRequest)
	}
	p := &kvTransferParams{}
	var err error
	if p.doRemoteDecode, err = optionalBool(kv, "do_remote_decode"); err != nil {
		return err
	}
	if p.doRemotePrefill, err = optionalBool(kv, "do_remote_prefill"); err != nil {
		return err
	}
	if id := kv.Get("remote_engine_id"); id != nil && id.Type() == fastjson.TypeString {
		p.remoteEngineID, p.hasEngineID = string(id.GetStringBytes()), true
	}
	if ids := kv.Get("remote_block_ids"); ids != nil && ids.Type() == fastjson.TypeArray {
		p.remoteBlocks, p.hasBlockIDs = len(ids.GetArray()), true
	}
	r.kv = p
	return nil
}

func (r *inferenceRequest) readBootstrap(v *fastjson.Value) error {
	room := v.Get("bootstrap_room")
	r.bootstrap = room != nil && room.Type() != fastjson.TypeNull
	return nil
}

// optionalBool reads a boolean field that may be absent or null (false).
func optionalBool(v *fastjson.Value, key string) (bool, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return false, nil
	}
	b, err := f.Bool()
	if err != nil {
		return false, fmt.Errorf("%w: %s must be a boolean", errBadRequest, key)
	}
	return b, nil
}

// clampTokens keeps a token count within what the engine's arithmetic handles.
func clampTokens(n int) int {
	return min(n, math.MaxInt32)
}
