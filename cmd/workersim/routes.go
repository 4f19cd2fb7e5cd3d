package main

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// The endpoints: vLLM's OpenAI-compatible API and its Anthropic Messages API (messages.go), the
// SGLang-native endpoints vllm-router forwards, and workersim's own.
const (
	pathCompletions      = "/v1/completions"
	pathChatCompletions  = "/v1/chat/completions"
	pathEmbeddings       = "/v1/embeddings"
	pathRerank           = "/rerank"
	pathRerankV1         = "/v1/rerank"
	pathRerankV2         = "/v2/rerank"
	pathResponses        = "/v1/responses"
	pathModels           = "/v1/models"
	pathHealth           = "/health"
	pathMetrics          = "/metrics"
	pathResetPrefixCache = "/reset_prefix_cache" // vLLM
	pathGenerate         = "/generate"           // SGLang
	pathHealthGenerate   = "/health_generate"    // SGLang
	pathModelInfo        = "/get_model_info"     // SGLang
	pathServerInfo       = "/get_server_info"    // SGLang
	pathFlushCache       = "/flush_cache"        // SGLang
	pathAdminFault       = "/admin/fault"
	headerWorkerID       = "x-worker-id"
)

// inferencePaths are the endpoints counted in workersim_requests_total.
var inferencePaths = []string{
	pathCompletions, pathChatCompletions, pathEmbeddings, pathRerank, pathRerankV1, pathRerankV2,
	pathResponses, pathGenerate, pathMessages,
}

// endpoint holds the handlers of one path by method; a nil handler is not served there.
type endpoint struct {
	get, post, put, del fasthttp.RequestHandler
}

func (e endpoint) handler(method []byte) fasthttp.RequestHandler {
	switch string(method) {
	case fasthttp.MethodGet:
		return e.get
	case fasthttp.MethodPost:
		return e.post
	case fasthttp.MethodPut:
		return e.put
	case fasthttp.MethodDelete:
		return e.del
	}
	return nil
}

// routes is the table of exact paths; the stored responses under /v1/responses/ are routed by
// handleStoredResponse.
func (s *server) routes() map[string]endpoint {
	rerank := endpoint{post: s.handleRerank}
	generate := s.handleGenerate
	flush := s.handleFlushCache
	return map[string]endpoint{
		pathCompletions:      {post: s.handleCompletions(false)},
		pathChatCompletions:  {post: s.handleCompletions(true)},
		pathEmbeddings:       {post: s.handleEmbeddings},
		pathRerank:           rerank,
		pathRerankV1:         rerank,
		pathRerankV2:         rerank,
		pathResponses:        {post: s.handleResponses},
		pathModels:           {get: s.handleModels},
		pathHealth:           {get: s.handleHealth},
		pathMetrics:          {get: s.handleMetrics},
		pathResetPrefixCache: {post: s.handleResetPrefixCache},
		pathGenerate:         {post: generate, put: generate},
		pathHealthGenerate:   {get: s.handleHealthGenerate},
		pathModelInfo:        {get: s.handleModelInfo},
		pathServerInfo:       {get: s.handleServerInfo},
		pathFlushCache:       {get: flush, post: flush},
		pathAdminFault:       {get: s.handleFault, post: s.handleFault},
		pathTokenize:         {post: s.handleTokenize},
		pathMessages:         {post: s.handleMessages},
		pathCountTokens:      {post: s.handleCountTokens},
	}
}

func (s *server) handle(ctx *fasthttp.RequestCtx) {
	s.setCommonHeaders(ctx)
	if h := s.route(ctx); h != nil {
		h(ctx)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNotFound)
	ctx.SetContentType("application/json")
	ctx.SetBody(errorBody(ctx.Path(), "no route for "+string(ctx.Method())+" "+string(ctx.Path()),
		apiError{status: fasthttp.StatusNotFound, typ: "invalid_request_error", code: "not_found"}))
}

func (s *server) route(ctx *fasthttp.RequestCtx) fasthttp.RequestHandler {
	if e, ok := s.endpoints[string(ctx.Path())]; ok {
		return e.handler(ctx.Method())
	}
	rest, ok := strings.CutPrefix(string(ctx.Path()), pathResponses+"/")
	if !ok {
		return nil
	}
	return s.storedResponseHandler(ctx.Method(), rest)
}
