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
// handleStoredResponse. The runtime LoRA updates are served with LoRA on (--lora-modules or
// --max-loras), the KV oracle with --kv-events-endpoint.
func (s *server) routes() map[string]endpoint {
	api, admin := s.inference, s.admin
	rerank := endpoint{post: api.handleRerank}
	generate := api.handleGenerate
	flush := admin.handleFlushCache
	routes := map[string]endpoint{
		pathCompletions:      {post: api.handleCompletions(false)},
		pathChatCompletions:  {post: api.handleCompletions(true)},
		pathEmbeddings:       {post: api.handleEmbeddings},
		pathRerank:           rerank,
		pathRerankV1:         rerank,
		pathRerankV2:         rerank,
		pathResponses:        {post: s.responses.handleResponses},
		pathModels:           {get: s.models.handleModels},
		pathHealth:           {get: admin.handleHealth},
		pathMetrics:          {get: s.handleMetrics},
		pathResetPrefixCache: {post: admin.handleResetPrefixCache},
		pathGenerate:         {post: generate, put: generate},
		pathHealthGenerate:   {get: admin.handleHealthGenerate},
		pathModelInfo:        {get: admin.handleModelInfo},
		pathServerInfo:       {get: admin.handleServerInfo},
		pathFlushCache:       {get: flush, post: flush},
		pathAdminFault:       {get: admin.handleFault, post: admin.handleFault},
		pathTokenize:         {post: s.tokenizer.handleTokenize},
		pathMessages:         {post: api.handleMessages},
		pathCountTokens:      {post: s.tokenizer.handleCountTokens},
	}
	if s.cfg.lora {
		routes[pathLoadAdapter] = endpoint{post: s.models.handleLoadAdapter}
		routes[pathUnloadAdapter] = endpoint{post: s.models.handleUnloadAdapter}
	}
	if s.kv != nil {
		routes[pathKVOracle] = endpoint{post: admin.handleKVOracle}
	}
	return routes
}

func (s *server) handle(ctx *fasthttp.RequestCtx) {
	s.reply.setCommonHeaders(ctx)
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
	return s.responses.storedResponseHandler(ctx.Method(), rest)
}
