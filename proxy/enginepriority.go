package proxy

import (
	"bytes"
	"strconv"
	"unicode"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvrouter/kvrouter/admission"
	"github.com/kvrouter/kvrouter/proxy/wire"
)

// With --engine-priority the engines run vLLM's priority scheduling, and a
// request's class goes on to the engine as its body's priority field (the
// class's rank, 0 the highest: vLLM serves lower first), replacing the
// client's, on every route whose body an engine reads a priority from.
// Where the client's passed, a key held to bulk could write priority -100
// and be served by the engine ahead of system.

// enginePriority tells, for each endpoint with a body, whether an engine
// reads a priority from it. A route added to endpoints with a body must
// take a side here: TestEveryRouteWithABodyDecidesOnEnginePriority fails
// until it does.
var enginePriority = map[*wire.Endpoint]bool{
	wire.Completions:     true, // vLLM CompletionRequest.priority
	wire.ChatCompletions: true, // vLLM ChatCompletionRequest.priority
	wire.Embeddings:      true, // vLLM's pooling requests (PoolingBasicRequestMixin.priority)
	wire.Rerank:          true, // the same
	wire.RerankBare:      true,
	wire.Responses:       true, // vLLM ResponsesRequest.priority
	// SGLang's native API (GenerateReqInput.priority); an SGLang engine
	// reads it as vLLM does with --schedule-low-priority-values-first.
	wire.Generate: true,
	// vLLM's Anthropic request (AnthropicMessagesRequest) has no priority:
	// its engine schedules a message at the default priority, whatever
	// the body says, and a count is no generation.
	wire.Messages:            false,
	wire.MessagesCountTokens: false,
}

// carriesEnginePriority reports whether an engine reads a priority from
// the body of a request to ep.
func carriesEnginePriority(ep *wire.Endpoint) bool { return ep != nil && enginePriority[ep] }

// stampPriority passes an admitted request's class on to the engine as
// its priority field, once its body is read, when the admitter stamps
// priorities (see EnginePriority). A body that is not a JSON object is
// left for the route to refuse.
func stampPriority(rc *fasthttp.RequestCtx, tk *admission.Ticket) {
	if tk == nil || !carriesEnginePriority(wire.EndpointAt(rc.Path())) {
		return
	}
	if body, ok := withPriority(rc.Request.Body(), int(tk.Request().Class)); ok {
		rc.Request.SetBodyRaw(body)
	}
}

// withPriority is body with its priority field set to rank: written after
// the opening brace, or, when the body may name one already (it says
// priority, or holds an escape that could spell it), set by a parse that
// first deletes every priority the client sent, so that no parser, whether
// the first or the last of duplicate keys wins, reads the client's.
func withPriority(body []byte, rank int) ([]byte, bool) {
	if bytes.Contains(body, []byte("priority")) || bytes.IndexByte(body, '\\') >= 0 {
		var parser fastjson.Parser
		v, err := parser.ParseBytes(body)
		if err != nil || v.Type() != fastjson.TypeObject {
			return nil, false
		}
		o, _ := v.Object()
		for o.Get("priority") != nil {
			o.Del("priority")
		}
		var a fastjson.Arena
		o.Set("priority", a.NewNumberInt(rank))
		return v.MarshalTo(nil), true
	}
	open := bytes.IndexFunc(body, func(r rune) bool { return !unicode.IsSpace(r) })
	if open < 0 || body[open] != '{' {
		return nil, false
	}
	rest := bytes.TrimLeftFunc(body[open+1:], unicode.IsSpace)
	out := make([]byte, 0, len(body)+24)
	out = append(out, body[:open+1]...)
	out = append(out, `"priority":`...)
	out = strconv.AppendInt(out, int64(rank), 10)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[open+1:]...), true
}
