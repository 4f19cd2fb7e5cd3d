package main

import (
	"cmp"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/sim"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// responsesAPI serves OpenAI's Responses API: its generations go through the jobRunner, and it
// keeps the responses stored (store) and runs the background ones until shutdown.
type responsesAPI struct {
	store    *responseStore // the Responses API's stored responses
	bg       goroutines     // background responses
	ids      *responseIDs
	models   *modelCatalog
	jobs     *jobRunner
	reply    *replier
	stopping <-chan struct{} // closed when shutdown begins
}

// handleResponses serves POST /v1/responses, OpenAI's Responses API as vLLM serves it for a
// model without tools: the input (a string or message items) after the instructions and, with
// previous_response_id, after the stored conversation it continues, is rendered like a chat and
// generated once. Stored responses (store, on by default) can be fetched, listed and continued;
// background ones (background with store) answer at once and can be cancelled.
func (ra *responsesAPI) handleResponses(ctx *fasthttp.RequestCtx) {
	j, tickets, ok := ra.jobs.startJob(ctx, ra.responsesJob)
	if !ok {
		return
	}
	if r := j.render.(*responsesRenderer); r.meta.background {
		ra.startBackground(ctx, j, r, tickets[0])
		return
	}
	ra.jobs.answer(ctx, j, tickets)
}

// responsesRequest is what the worker needs from a Responses API request.
type responsesRequest struct {
	model           string
	input           []sim.Message
	instructions    string
	hasInstructions bool
	previousID      string
	requestID       string // the id to give the response (vLLM's request_id), "" for one of the worker's own
	metadata        []byte // the metadata object as given (compacted), nil when absent
	maxOutput       int    // max_output_tokens as given, 0 when absent
	stream          bool
	store           bool
	background      bool
}

// The message roles the Responses API accepts in input items.
var inputRoles = map[string]bool{"user": true, "assistant": true, "system": true, "developer": true}

func (ra *responsesAPI) responsesJob(parser *fastjson.Parser, body []byte) (job, error) {
	req, err := ra.parseResponses(parser, body)
	if err != nil {
		return job{}, err
	}
	var prev []byte
	if req.previousID != "" {
		p, ok := ra.store.get(req.previousID)
		if !ok {
			return job{}, fmt.Errorf("%w: previous_response_id %q", errResponseNotFound, req.previousID)
		}
		prev = p.history
	}
	// Instructions are not carried into the history: a continuation states its own.
	history := concat(prev, sim.RenderChat(req.input))
	var system []byte
	if req.hasInstructions {
		system = sim.RenderChat([]sim.Message{{Role: "system", Content: req.instructions}})
	}
	maxTokens := req.maxOutput
	if maxTokens == 0 {
		maxTokens = defaultMaxTokens // vLLM fills the context; a simulation keeps it short
	}
	r := &responsesRenderer{
		store: ra.store, input: req.input, history: history, maxTokens: maxTokens,
		meta: responseMeta{
			id: cmp.Or(req.requestID, ra.ids.response()), created: time.Now().Unix(), model: req.model,
			instructions: req.instructions, hasInstructions: req.hasInstructions,
			maxOutput: req.maxOutput, previousID: req.previousID, store: req.store, background: req.background,
			metadata: req.metadata,
		},
	}
	sub := submission{prompt: concat(system, history), maxTokens: maxTokens, streamTokens: req.stream}
	return job{subs: []submission{sub}, stream: req.stream, render: r}, nil
}

// concat returns a new slice holding a then b, sharing memory with neither.
func concat(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

func (ra *responsesAPI) parseResponses(p *fastjson.Parser, body []byte) (responsesRequest, error) {
	v, err := parseObject(p, body)
	if err != nil {
		return responsesRequest{}, err
	}
	var req responsesRequest
	steps := []func(*fastjson.Value) error{
		func(v *fastjson.Value) (err error) {
			req.model, _, err = optionalString(v, "model")
			if err == nil {
				req.model, err = ra.models.resolveModel(req.model)
			}
			return err
		},
		func(v *fastjson.Value) (err error) { req.input, err = readInput(v.Get("input")); return err },
		func(v *fastjson.Value) (err error) {
			req.instructions, req.hasInstructions, err = optionalString(v, "instructions")
			return err
		},
		func(v *fastjson.Value) (err error) {
			req.previousID, _, err = optionalString(v, "previous_response_id")
			return err
		},
		func(v *fastjson.Value) (err error) {
			// vLLM's request_id names the response it makes, as given
			req.requestID, _, err = optionalString(v, "request_id")
			return err
		},
		func(v *fastjson.Value) (err error) {
			req.maxOutput, err = optionalPositiveInt(v, "max_output_tokens", 0)
			return err
		},
		func(v *fastjson.Value) (err error) { req.stream, err = optionalBool(v, "stream"); return err },
		func(v *fastjson.Value) (err error) {
			req.store, err = optionalBoolDefault(v, "store", true)
			return err
		},
		func(v *fastjson.Value) (err error) { req.background, err = optionalBool(v, "background"); return err },
		func(v *fastjson.Value) (err error) { req.metadata, err = readMetadata(v.Get("metadata")); return err },
	}
	for _, step := range steps {
		if err := step(v); err != nil {
			return req, err
		}
	}
	return req, checkBackground(req)
}

func checkBackground(req responsesRequest) error {
	switch {
	case req.background && !req.store:
		return fmt.Errorf("%w: background requires store", errBadRequest)
	case req.background && req.stream:
		return fmt.Errorf("%w: workersim does not stream background responses", errBadRequest)
	}
	return nil
}

// readInput reads input: a string (one user message) or an array of message items, each with a
// role and a content that is a string or an array of parts whose text fields are concatenated
// (parts without text, such as images, add nothing), as chat messages are rendered.
func readInput(v *fastjson.Value) ([]sim.Message, error) {
	if v != nil && v.Type() == fastjson.TypeString {
		return []sim.Message{{Role: "user", Content: string(v.GetStringBytes())}}, nil
	}
	if v == nil || v.Type() != fastjson.TypeArray {
		return nil, fmt.Errorf("%w: input must be a string or an array of message items", errBadRequest)
	}
	items := v.GetArray()
	msgs := make([]sim.Message, len(items))
	for i, item := range items {
		var err error
		if msgs[i], err = readInputItem(item); err != nil {
			return nil, fmt.Errorf("input[%d]: %w", i, err)
		}
	}
	return msgs, nil
}

func readInputItem(item *fastjson.Value) (sim.Message, error) {
	if item.Type() != fastjson.TypeObject {
		return sim.Message{}, fmt.Errorf("%w: an input item must be an object", errBadRequest)
	}
	if typ, set, err := optionalString(item, "type"); err != nil || (set && typ != "message") {
		return sim.Message{}, fmt.Errorf("%w: only message items are served, not %q", errBadRequest, typ)
	}
	role, _, err := optionalString(item, "role")
	if err != nil || !inputRoles[role] {
		return sim.Message{}, fmt.Errorf("%w: role must be user, assistant, system or developer", errBadRequest)
	}
	text, err := contentText(item.Get("content"))
	return sim.Message{Role: role, Content: text}, err
}

// contentText flattens a message content as the router's chat rendering does.
func contentText(content *fastjson.Value) (string, error) {
	if content == nil || content.Type() == fastjson.TypeNull {
		return "", nil
	}
	switch content.Type() {
	case fastjson.TypeString:
		return string(content.GetStringBytes()), nil
	case fastjson.TypeArray:
		var b []byte
		for _, part := range content.GetArray() {
			b = append(b, part.GetStringBytes("text")...)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("%w: content must be a string, an array of parts or null", errBadRequest)
}

// responseIDs makes the ids of the worker's answers from one sequence: unique within the
// process, and the Responses API's unique to this worker and boot.
type responseIDs struct {
	seq     atomic.Uint64
	created int64  // unix seconds at start
	tag     string // names this worker and boot in the Responses API's ids
}

// next returns a response id unique within the process.
func (ids *responseIDs) next(prefix string) string {
	return prefix + strconv.FormatUint(ids.seq.Add(1), 36) + "-" + strconv.FormatInt(ids.created, 36)
}

// response returns a response id unique to this worker and boot: resp_, then the hex of the
// worker id, its boot time and a sequence number. The router can read the worker back out of it.
func (ids *responseIDs) response() string {
	return "resp_" + ids.tag + strconv.FormatUint(ids.seq.Add(1), 36)
}

// responseIDTag is the part of response ids that names the worker and its boot.
func responseIDTag(workerID string, boot time.Time) string {
	return fmt.Sprintf("%x_%s_", workerID, strconv.FormatInt(boot.UnixNano(), 36))
}

// responsesRenderer renders one response: its object, its SSE events, and its record in the
// store once it completes.
type responsesRenderer struct {
	store     *responseStore
	meta      responseMeta
	input     []sim.Message
	history   []byte // the conversation through this response's input
	maxTokens int
	seq       int // sequence_number of the next event
}

var (
	_ streamRenderer = (*responsesRenderer)(nil)
	_ finisher       = (*responsesRenderer)(nil)
)

func (r *responsesRenderer) appendBody(dst []byte, final []sim.Usage) []byte {
	return appendResponse(dst, r.meta, statusCompleted, &final[0])
}

// finish records the completed response: it fills in a background one, or stores a new one.
func (r *responsesRenderer) finish(final []sim.Usage) {
	u := final[0]
	history := concat(r.history, sim.RenderChat([]sim.Message{{Role: "assistant", Content: repeatToken(u.Completion)}}))
	switch {
	case r.meta.background:
		r.store.update(r.meta.id, func(st *storedResponse) {
			st.status, st.usage, st.history = statusCompleted, u, history
		})
	case r.meta.store:
		r.store.put(storedResponse{meta: r.meta, status: statusCompleted, usage: u, input: r.input, history: history})
	}
}

// stored is the record of a background response as it starts.
func (r *responsesRenderer) stored(run *backgroundRun) storedResponse {
	return storedResponse{meta: r.meta, status: statusQueued, input: r.input, history: r.history, run: run}
}

// readMetadata reads the metadata a response is stored with, and shows on
// retrieval, as the OpenAI API keeps it: an object of string values.
func readMetadata(v *fastjson.Value) ([]byte, error) {
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil, nil
	}
	o, err := v.Object()
	if err != nil {
		return nil, fmt.Errorf("%w: metadata must be an object", errBadRequest)
	}
	var bad error
	o.Visit(func(k []byte, item *fastjson.Value) {
		if item.Type() != fastjson.TypeString && bad == nil {
			bad = fmt.Errorf("%w: metadata value %q must be a string", errBadRequest, k)
		}
	})
	if bad != nil {
		return nil, bad
	}
	return v.MarshalTo(nil), nil
}
