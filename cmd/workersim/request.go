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
	priority     int               // vLLM's priority field: lower first; 0 when absent
	prompt       []byte            // routing text, as the router renders it
	kv           *kvTransferParams // vLLM P/D, nil when absent or null
	bootstrap    bool              // SGLang P/D: bootstrap_room is set
	salt         string            // vLLM's cache_salt: its prompt is cached apart
	// context is what the generated text continues (textGen); seed, when seeded, the request's
	// seed field.
	context []byte
	seed    uint64
	seeded  bool
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
	v, err := parseObject(p, body)
	if err != nil {
		return inferenceRequest{}, err
	}
	r := inferenceRequest{chat: chat}
	steps := []func(*fastjson.Value) error{
		r.readModel, r.readStream, r.readMaxTokens, r.readPriority, r.readPrompt, r.readKVTransfer, r.readBootstrap,
		r.readCacheSalt, r.readSeed,
	}
	for _, step := range steps {
		if err := step(v); err != nil {
			return inferenceRequest{}, err
		}
	}
	return r, nil
}

// parseObject parses a request body that must be a JSON object.
func parseObject(p *fastjson.Parser, body []byte) (*fastjson.Value, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed JSON: %w", errBadRequest, err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("%w: the body must be a JSON object", errBadRequest)
	}
	return v, nil
}

func (r *inferenceRequest) readModel(v *fastjson.Value) error {
	var err error
	r.model, _, err = optionalString(v, "model")
	return err
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
		var err error
		if r.maxTokens, err = optionalPositiveInt(v, key, r.maxTokens); err != nil {
			return err
		}
	}
	return nil
}

// readPriority takes vLLM's priority field, an integer (negative allowed), absent or null 0.
func (r *inferenceRequest) readPriority(v *fastjson.Value) error {
	f := v.Get("priority")
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil
	}
	n, err := f.Int()
	if err != nil {
		return fmt.Errorf("%w: priority must be an integer", errBadRequest)
	}
	r.priority = n
	return nil
}

func (r *inferenceRequest) readPrompt(v *fastjson.Value) error {
	var err error
	if r.chat {
		if v.Get("messages") == nil {
			return fmt.Errorf("%w: messages is required", errBadRequest)
		}
		var continueFinal bool
		if continueFinal, err = optionalBool(v, "continue_final_message"); err != nil {
			return err
		}
		// tools first, as the chat template renders them
		r.context, r.prompt, err = generationContext(v, continueFinal)
	} else {
		r.prompt, err = sim.AppendPromptJSON(nil, v.Get("prompt"))
		r.context = r.prompt
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

// readCacheSalt takes vLLM's cache_salt: absent or null is none, anything else a non-empty
// string, as vLLM requires.
func (r *inferenceRequest) readCacheSalt(v *fastjson.Value) error {
	salt, set, err := optionalString(v, "cache_salt")
	if err == nil && set && salt == "" {
		err = fmt.Errorf("%w: Parameter 'cache_salt' must be a non-empty string if provided.", errBadRequest)
	}
	r.salt = salt
	return err
}

// readSeed takes the request's seed: its generated text is then drawn from it (textGen).
func (r *inferenceRequest) readSeed(v *fastjson.Value) error {
	f := v.Get("seed")
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil
	}
	n, err := f.Int64()
	if err != nil {
		return fmt.Errorf("%w: seed must be an integer", errBadRequest)
	}
	r.seed, r.seeded = uint64(n), true
	return nil
}

func (r *inferenceRequest) readBootstrap(v *fastjson.Value) error {
	room := v.Get("bootstrap_room")
	r.bootstrap = room != nil && room.Type() != fastjson.TypeNull
	return nil
}

// optionalString reads a string field that may be absent or null (reported as not set).
func optionalString(v *fastjson.Value, key string) (text string, set bool, err error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", false, nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", false, fmt.Errorf("%w: %s must be a string", errBadRequest, key)
	}
	return string(b), true, nil
}

// optionalPositiveInt reads a positive integer field (a token count), returning def when it is
// absent or null; the value is clamped to what the engine handles.
func optionalPositiveInt(v *fastjson.Value, key string, def int) (int, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return def, nil
	}
	n, err := f.Int()
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s must be a positive integer", errBadRequest, key)
	}
	return clampTokens(n), nil
}

// optionalBoolDefault reads a boolean field, returning def when it is absent or null.
func optionalBoolDefault(v *fastjson.Value, key string, def bool) (bool, error) {
	if f := v.Get(key); f == nil || f.Type() == fastjson.TypeNull {
		return def, nil
	}
	return optionalBool(v, key)
}

// appendTokenIDs appends the text the engine hashes for a prompt given as token ids: each id as
// width little-endian bytes (width is the engine's bytes per token), so the engine counts
// exactly one token per id and equal id sequences share cached blocks.
func appendTokenIDs(dst []byte, ids *fastjson.Value, width int) ([]byte, error) {
	arr, err := ids.Array()
	if err != nil {
		return dst, fmt.Errorf("%w: token ids must be an array of integers", errBadRequest)
	}
	for i, id := range arr {
		n, err := id.Uint64()
		if err != nil || n > math.MaxUint32 {
			return dst, fmt.Errorf("%w: token id [%d] must be an integer in 0..%d", errBadRequest, i, uint64(math.MaxUint32))
		}
		for b := range width {
			dst = append(dst, byte(n>>(8*(b%4))))
		}
	}
	return dst, nil
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
